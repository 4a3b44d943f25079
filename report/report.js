// report.js: draws a normlab study report from the inlined results.json with Chart.js: the written
// summary, what was not measured and why, the run table (with BLEU for translation runs), the mean
// and spread over seeds per setting, BLEU by run, loss curves with divergence markers, the instruments' readings by layer
// (gradient norms, activation norms, branch ratios, Jacobian spectra, attention spectral norms) and
// the theory claims. It records what it drew in #normlab-selftest for the headless-browser test.
'use strict';

(function () {
  const data = JSON.parse(document.getElementById('normlab-data').textContent);
  const root = document.getElementById('report');
  const check = window.normlabCheck;
  const runs = data.runs;
  const varying = data.study.varying || [];

  // ---- small DOM helpers ----
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v; else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }
  // the unit of a run's unigram entropy and losses: 'byte', 'token' with data.tokenizer, or 'target byte'
  // for a translation run (its decoder's labels)
  const unitOf = (run) => ['token', 'target byte'].includes(run.unigram_unit) ? run.unigram_unit : 'byte';
  const capital = (s) => s.charAt(0).toUpperCase() + s.slice(1);
  const fmt = (x, digits) => (typeof x === 'number' && isFinite(x)) ? x.toFixed(digits) : '-';
  const shortKey = (k) => k.slice(k.indexOf('.') + 1);
  // a varying key's name in text: short, or dotted when another varying key shares it (train.seed, model.seed)
  const keyText = (k) => varying.some((o) => o !== k && shortKey(o) === shortKey(k)) ? k : shortKey(k);
  const bleuOf = (run) => (run.summary && typeof run.summary.bleu === 'number') ? run.summary.bleu : null;
  const withBleu = runs.some((r) => bleuOf(r) !== null);

  // ---- colours: by placement when placement varies, dashes for the other keys ----
  const placementColour = {post: '#d62728', pre: '#1f77b4', sandwich: '#2ca02c', deepnorm: '#9467bd',
                           prepost: '#ff7f0e', none: '#7f7f7f', admin: '#8c564b'};
  const palette = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#17becf',
                   '#bcbd22', '#7f7f7f'];
  const dashes = [[], [6, 4], [2, 3], [10, 3, 2, 3], [1, 6]];
  function gridValue(run, key) {
    if (run.grid && key in run.grid) return run.grid[key];
    const [section, name] = [key.slice(0, key.indexOf('.')), shortKey(key)];
    return run.config[section][name];
  }
  const style = (() => {
    const byPlacement = varying.includes('model.placement');
    const seen = {};
    return runs.map((run, i) => {
      const p = JSON.stringify(gridValue(run, 'model.placement')).replace(/"/g, '');
      const colour = byPlacement ? (placementColour[p] || palette[i % palette.length]) : palette[i % palette.length];
      const group = byPlacement ? p : '';
      seen[group] = (seen[group] || 0) + 1;
      return {colour, dash: byPlacement ? dashes[(seen[group] - 1) % dashes.length] : dashes[Math.floor(i / palette.length) % dashes.length]};
    });
  })();

  // ---- charts ----
  Chart.defaults.animation = false;
  Chart.defaults.font.size = 11;
  Chart.defaults.plugins.legend.display = false;  // one legend for every chart: legend() below

  function canvasDrawn(canvas) {
    const ctx = canvas.getContext('2d');
    if (!canvas.width || !canvas.height) return false;
    const pixels = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let painted = 0;
    for (let i = 3; i < pixels.length; i += 4) if (pixels[i] !== 0) painted++;
    return painted > 200;
  }

  // A card with a chart; `config` is a Chart.js config. Returns the chart, or null when there is no data.
  function chartCard(parent, title, note, config, options) {
    const card = el('div', {class: 'card'});
    const head = el('h3', {}, title);
    card.append(head);
    const hasData = config.data.datasets.some((d) => d.data.length > 0);
    if (!hasData) {
      card.append(el('p', {class: 'note'}, 'No data for this chart in this study.'));
      parent.append(card);
      return null;
    }
    const canvas = el('canvas', {'data-chart': title});
    const box = el('div', {class: 'chart'}, canvas);
    card.append(box);
    if (note) card.append(el('p', {class: 'note'}, note));
    parent.append(card);
    config.options = Object.assign({responsive: true, maintainAspectRatio: false, parsing: false,
                                    interaction: {mode: 'nearest', intersect: false}}, config.options || {});
    check.charts++;
    let chart;
    try {
      chart = new Chart(canvas, config);
    } catch (e) {
      check.errors.push('chart "' + title + '": ' + e.message);
      check.missing.push(title);
      return null;
    }
    if (canvasDrawn(canvas)) check.drawn++; else check.missing.push(title);
    if (options && options.logToggle) {
      const toggle = el('span', {class: 'toggle'});
      for (const type of ['linear', 'logarithmic']) {
        const b = el('button', {type: 'button'}, type === 'linear' ? 'linear' : 'log');
        if (chart.options.scales.y.type === type) b.classList.add('on');
        b.addEventListener('click', () => {
          chart.options.scales.y.type = type;
          chart.update();
          for (const other of toggle.children) other.classList.toggle('on', other === b);
        });
        toggle.append(b);
      }
      head.append(toggle);
    }
    return chart;
  }

  function lineSet(run, i, points, extra) {
    return Object.assign({label: run.label, data: points, borderColor: style[i].colour, backgroundColor: style[i].colour,
                          borderDash: style[i].dash, borderWidth: 1.6, pointRadius: 0, tension: 0}, extra || {});
  }
  // Log axes: ticks at 1, 2 and 5 times powers of ten, in short form; linear axes: Chart.js's own.
  function tickLabel(value, index, ticks) {
    if (this.type !== 'logarithmic') return Chart.Ticks.formatters.numeric.call(this, value, index, ticks);
    const mantissa = value / Math.pow(10, Math.floor(Math.log10(value) + 1e-9));
    if (![1, 2, 5].some((m) => Math.abs(mantissa - m) < 1e-6)) return '';
    return (value >= 1e-3 && value < 1e5) ? String(+value.toPrecision(3)) : value.toExponential(0);
  }
  const axis = (title, type) => ({type: type || 'linear', title: {display: true, text: title},
                                  ticks: {callback: tickLabel}});

  // Moving average (the plotted training curves; the table uses the raw numbers).
  function smooth(values, window) {
    const out = [];
    let sum = 0;
    for (let i = 0; i < values.length; i++) {
      sum += values[i];
      if (i >= window) sum -= values[i - window];
      out.push(sum / Math.min(i + 1, window));
    }
    return out;
  }
  function thin(points, max) {
    if (points.length <= max) return points;
    const stride = points.length / max;
    const out = [];
    for (let k = 0; k < max; k++) out.push(points[Math.floor(k * stride)]);
    out.push(points[points.length - 1]);
    return out;
  }

  // ---- header and summary ----
  const study = data.study;
  root.append(el('h1', {}, study.title || study.name));
  if (study.description) root.append(el('p', {class: 'lead'}, study.description));
  root.append(el('p', {class: 'meta'}, `study "${study.name}", ${runs.length} runs, ${fmt(data.elapsed_s, 0)} s on this machine; ` +
                 `varied: ${varying.map(keyText).join(', ') || 'nothing'}; generated by normlab compare`));
  if (data.interrupted) root.append(el('div', {class: 'banner'}, 'Interrupted (Ctrl-C): only the runs marked finished or diverged completed.'));
  root.append(el('h2', {}, 'What happened'));
  const ul = el('ul', {class: 'summary'});
  for (const line of data.summary || []) ul.append(el('li', {}, line));
  root.append(ul);

  // ---- what was not measured, and why (results.json: run.skipped) ----
  const skipped = {};  // reason -> labels
  for (const run of runs) for (const [what, why] of Object.entries(run.skipped || {})) {
    const reason = what.replace(/_/g, ' ') + ': ' + why;
    (skipped[reason] = skipped[reason] || []).push(run.label);
  }
  if (Object.keys(skipped).length) {
    root.append(el('h2', {}, 'Not measured'));
    const list = el('ul', {class: 'summary', id: 'not-measured'});
    for (const [reason, labels] of Object.entries(skipped))
      list.append(el('li', {}, reason + ' (' + (labels.length === runs.length ? 'every run' : labels.join(', ')) + ').'));
    root.append(list);
  }

  // ---- run table ----
  root.append(el('h2', {}, 'Runs'));
  const table = el('table');
  const headers = ['run', 'status', 'final train loss', 'final val loss', ...(withBleu ? ['BLEU'] : []), 'diverged at',
                   'steps to target', 'tokens/s', 'grad norm last/first layer at init', 'time (s)'];
  table.append(el('tr', {}, ...headers.map((h, k) => el('th', {class: k < 2 ? 'text' : ''}, h))));
  for (const run of runs) {
    const s = run.summary || {};
    const init = run.instruments && run.instruments.init;
    const cells = [
      el('td', {class: 'text'}, run.label),
      el('td', {class: 'text status-' + run.status.replace(' ', '-')}, run.status + (run.error ? ': ' + run.error : '')),
      el('td', {}, fmt(s.train_loss, 4)), el('td', {}, fmt(s.val_loss, 4)),
      ...(withBleu ? [el('td', {}, fmt(bleuOf(run), 2))] : []),
      el('td', {}, run.status === 'diverged' ? String(run.diverged.step) : '-'),
      el('td', {}, run.loss_target == null ? '-' : run.steps_to_target == null ? (run.summary ? 'never' : '-') : String(run.steps_to_target)),
      el('td', {}, fmt(s.tokens_per_s, 0)),
      el('td', {}, init ? gradRatioText(init) : '-'),
      el('td', {}, fmt(s.seconds, 1)),
    ];
    table.append(el('tr', {}, ...cells));
  }
  root.append(table);
  const target = runs.find((r) => r.loss_target != null);
  if (target) root.append(el('p', {class: 'meta'}, `Steps to target: first step where the mean of the last 20 training losses ` +
      `is at most ${fmt(target.loss_target, 3)} nats.` + (target.unigram_entropy != null ? ` ${capital(unitOf(target))} unigram entropy of the corpus: ${fmt(target.unigram_entropy, 3)} nats per ${unitOf(target)}.` : '')));
  const translated = runs.find((r) => r.bleu);
  if (translated) root.append(el('p', {class: 'meta'}, `BLEU: corpus BLEU (sacrebleu's default) of greedy translations of the first ` +
      `${translated.bleu.sentences} validation pairs of ${translated.parallel ? translated.parallel.dir : 'the parallel corpus'}, ` +
      `after the last step. Losses of translation runs are nats per target byte; their unigram entropy is that of the ` +
      `training targets' bytes and EOS (the loss of a decoder that learned only target byte frequencies).`));

  // ---- over seeds: mean and spread per setting of the other keys (results.json: seed_groups) ----
  const groups = data.seed_groups || [];
  const stat = (st, digits) => st ? `${fmt(st.mean, digits)}${st.sd != null ? ' ± ' + fmt(st.sd, digits) : ''}` : '-';
  const span = (st, digits) => st ? `${fmt(st.min, digits)} to ${fmt(st.max, digits)}` : '-';
  if (groups.length) {
    root.append(el('h2', {}, 'Over seeds'));
    const t = el('table', {id: 'over-seeds'});
    const head = ['setting', 'runs', 'finished', 'val loss mean ± sd', 'val loss min to max',
                  ...(withBleu ? ['BLEU mean ± sd', 'BLEU min to max'] : [])];
    t.append(el('tr', {}, ...head.map((h, k) => el('th', {class: k < 1 ? 'text' : ''}, h))));
    for (const g of groups)
      t.append(el('tr', {}, el('td', {class: 'text'}, g.setting), el('td', {}, String(g.runs.length)),
                  el('td', {}, String(g.finished)), el('td', {}, stat(g.val_loss, 4)), el('td', {}, span(g.val_loss, 4)),
                  ...(withBleu ? [el('td', {}, stat(g.bleu, 2)), el('td', {}, span(g.bleu, 2))] : [])));
    root.append(t);
    root.append(el('p', {class: 'meta'}, 'sd: sample standard deviation over the seeds that finished (n - 1 in the denominator).'));
  }

  // One legend for all charts: a swatch drawn with the run's colour and dash.
  function legend() {
    const box = el('div', {class: 'legend'});
    runs.forEach((run, i) => {
      const swatch = el('canvas', {width: 36, height: 10});
      const ctx = swatch.getContext('2d');
      ctx.strokeStyle = style[i].colour;
      ctx.lineWidth = 2.5;
      ctx.setLineDash(style[i].dash);
      ctx.beginPath();
      ctx.moveTo(0, 5);
      ctx.lineTo(36, 5);
      ctx.stroke();
      box.append(el('span', {class: 'item'}, swatch, ' ' + run.label));
    });
    return box;
  }

  // ---- training ----
  const trained = runs.map((r, i) => [r, i]).filter(([r]) => r.train && r.train.step.length > 0);
  // a study that trains nothing (the pretrained one) has no training section
  const training = el('div', {class: 'grid'});
  if (trained.length) {
    root.append(el('h2', {}, 'Training'));
    root.append(legend());
    root.append(training);
  }
  const lossSets = trained.map(([run, i]) => {
    const loss = smooth(run.train.loss, 10);
    return lineSet(run, i, thin(run.train.step.map((s, k) => ({x: s, y: loss[k]})), 1500));
  });
  const markers = trained.filter(([run]) => run.status === 'diverged').map(([run, i]) => {
    const n = run.train.loss.length;
    const y = n ? run.train.loss[n - 1] : (run.unigram_entropy || 1);
    return {label: run.label + ' diverged', type: 'scatter', data: [{x: run.diverged.step, y}], pointStyle: 'crossRot',
            pointRadius: 9, borderWidth: 3, borderColor: style[i].colour, backgroundColor: style[i].colour};
  });
  const entropy = trained.length ? trained[0][0].unigram_entropy : null;
  const unit = trained.length ? unitOf(trained[0][0]) : 'byte';  // 'token' with data.tokenizer
  const maxStep = Math.max(1, ...trained.map(([r]) => r.train.step[r.train.step.length - 1]));
  const refSets = entropy ? [{label: unit + ' unigram entropy', data: [{x: 0, y: entropy}, {x: maxStep, y: entropy}],
                              borderColor: '#888', borderDash: [3, 3], borderWidth: 1, pointRadius: 0}] : [];
  if (trained.length) chartCard(training, 'Training loss (moving average of 10 steps)',
            `Crosses mark the step at which a run diverged (non-finite loss or gradient). The dashed grey line is the corpus' ${unit} unigram entropy: a run stuck there learned only ${unit} frequencies.`,
            {type: 'line', data: {datasets: [...lossSets, ...markers, ...refSets]},
             options: {scales: {x: axis('step'), y: axis(`loss (nats per ${unit})`)}}}, {logToggle: true});
  const valSets = trained.filter(([r]) => r.val && r.val.step.length).map(([run, i]) =>
    lineSet(run, i, run.val.step.map((s, k) => ({x: s, y: run.val.loss[k]})), {pointRadius: 2.5}));
  if (trained.length) chartCard(training, 'Validation loss', 'Mean over the same held-out batches at every evaluation.',
            {type: 'line', data: {datasets: [...valSets, ...refSets]},
             options: {scales: {x: axis('step'), y: axis(`loss (nats per ${unit})`)}}}, {logToggle: true});
  const normSets = trained.map(([run, i]) =>
    lineSet(run, i, thin(run.train.step.map((s, k) => ({x: s, y: run.train.grad_norm[k]})), 1500), {borderWidth: 1}));
  if (trained.length) chartCard(training, 'Gradient norm during training (before clipping)', null,
            {type: 'line', data: {datasets: normSets},
             options: {scales: {x: axis('step'), y: axis('global gradient norm', 'logarithmic')}}}, {logToggle: true});
  if (withBleu) {
    // one column per setting (the over-seeds groups, or every run on its own), a point per run
    const columns = groups.length ? groups.map((g) => g.setting) : runs.map((r) => r.label);
    const columnOf = (run) => groups.length ? groups.findIndex((g) => g.runs.includes(run.name)) : runs.indexOf(run);
    const points = runs.map((run, i) => [run, i]).filter(([run]) => bleuOf(run) !== null && columnOf(run) >= 0)
      .map(([run, i]) => ({label: run.label, type: 'scatter', data: [{x: columnOf(run), y: bleuOf(run)}], pointRadius: 5,
                           borderColor: style[i].colour, backgroundColor: style[i].colour}));
    const means = groups.filter((g) => g.bleu).map((g, k) => ({x: groups.indexOf(g), y: g.bleu.mean}));
    if (means.length) points.push({label: 'mean over seeds', type: 'scatter', data: means, pointStyle: 'line', pointRadius: 14,
                                   borderWidth: 2, borderColor: '#333', backgroundColor: '#333'});
    chartCard(training, 'Validation BLEU by run', 'A point per run (greedy decoding after the last step); the black bar is the mean over seeds.',
              {type: 'scatter', data: {datasets: points},
               options: {scales: {x: {type: 'linear', min: -0.5, max: columns.length - 0.5, offset: false,
                                      afterBuildTicks: (scale) => { scale.ticks = columns.map((_, k) => ({value: k})); },
                                      ticks: {autoSkip: false, callback: (v) => columns[v]}},
                                  y: axis('BLEU')}}});
  }

  // ---- encoder-decoder instruments, per stack (results.json: instruments.{init,final} with arch "encdec") ----
  function isEncdecProbe(run) {
    return Boolean(run.instruments && run.instruments.init && run.instruments.init.arch === 'encdec');
  }
  // The run table's gradient ratio: last layer / first, per stack for an encoder-decoder.
  function gradRatioText(init) {
    if (init.arch !== 'encdec') return fmt(init.dynamics.grad_norm_last_over_first, 3);
    return `enc ${fmt(init.dynamics.encoder.grad_norm_last_over_first, 2)} / dec ${fmt(init.dynamics.decoder.grad_norm_last_over_first, 2)}`;
  }
  // An x axis of layer indices within one stack: integer ticks only.
  function layerAxis(title) {
    return {type: 'linear', min: 0, title: {display: true, text: title},
            ticks: {stepSize: 1, precision: 0, callback: (v) => Number.isInteger(v) ? String(v) : ''}};
  }
  // A chart whose x axis counts layers must tick at integers only (the headless-browser test reads check.errors).
  function layerChartCard(parent, title, note, config) {
    const chart = chartCard(parent, title, note, config, {logToggle: true});
    if (chart && chart.scales.x.ticks.some((t) => !Number.isInteger(t.value)))
      check.errors.push(`chart "${title}": the layer axis has a tick between layers`);
    return chart;
  }
  // The encoder-decoder runs' readings: a panel per stack (and per kind of attention), layers counted
  // within their stack, then the decoder's and the source's Jacobians as a table.
  function encdecInstruments(parent, probed) {
    const first = probed[0][0].instruments.init;
    const stages = [['init', 'at initialization'], ['final', 'after training']].filter(([when]) => probed.some(([r]) => r.instruments[when]));
    parent.append(el('h3', {}, 'Encoder-decoder runs, per stack'));
    parent.append(el('p', {class: 'meta'}, `Input: ${first.input.what} (the batch: source ${first.input.S} and target ` +
      `${first.input.T} tokens with padding; the single pair: source ${first.input.pair.S}, target ${first.input.pair.T}). ` +
      'Layers are counted within their stack (encoder 0 .. N-1, decoder 0 .. M-1); the numbers are those of normlab analyze ' +
      'on the same checkpoint and input.'));
    parent.append(legend());
    const box = el('div', {class: 'grid', id: 'encdec-instruments'});
    parent.append(box);
    // one series per run probed at `when`; `suffix` names a secondary series of the same run
    const series = (when, pick, extra, suffix) => probed.filter(([r]) => r.instruments[when]).map(([run, i]) => {
      const d = lineSet(run, i, pick(run.instruments[when]), Object.assign({pointRadius: 2}, extra || {}));
      if (suffix) d.label += suffix;
      return d;
    }).filter((d) => d.data.length);
    const sub = (layer, kind) => layer.sublayers.find((x) => x.kind === kind && x.present);
    const layerPoints = (stack, key) => (rep) => rep.dynamics[stack].layers.map((l) => ({x: l.layer, y: l[key]}));
    const subPoints = (stack, kind, key) => (rep) => rep.dynamics[stack].layers.filter((l) => sub(l, kind) && sub(l, kind)[key] != null)
      .map((l) => ({x: l.layer, y: sub(l, kind)[key]}));
    const dashed = {borderDash: [6, 3]}, dotted = {borderDash: [2, 3]};
    const stacks = [['encoder', 'Encoder'], ['decoder', 'Decoder']];
    for (const [stack, name] of stacks) {
      const cross = stack === 'decoder' ? series('init', subPoints(stack, 'cross', 'grad_norm'), dashed, ' (cross-attention)') : [];
      layerChartCard(box, `${name}: gradient norm by ${stack} layer at initialization`,
        `Norm of the gradient of each ${stack} layer's parameters (solid)` + (cross.length ? ', and of its cross-attention\'s alone (dashed)' : '') +
        ', on the probe batch. Liu et al. 2020: at initialization a Post-LN decoder\'s gradients shrink toward its input, the encoder\'s do not.',
        {type: 'line', data: {datasets: [...series('init', layerPoints(stack, 'grad_norm')), ...cross]},
         options: {scales: {x: layerAxis(`${stack} layer`), y: axis('||dL/dθ_l||', 'logarithmic')}}});
    }
    for (const [when, stageName] of stages)
      for (const [stack, name] of stacks)
        layerChartCard(box, `${name}: activation norm by depth ${stageName}`,
          `Mean over real (unpadded) tokens of ||x_l||, the ${stack} stream entering layer l; the last point is the stream leaving its last layer (before the final norm).`,
          {type: 'line', data: {datasets: series(when, (rep) => [...layerPoints(stack, 'stream_norm')(rep),
                                                                  {x: rep.dynamics[stack].layers.length, y: rep.dynamics[stack].out_stream_norm}])},
           options: {scales: {x: layerAxis(`${stack} depth l`), y: axis('||x_l||', 'logarithmic')}}});
    for (const [stack, name] of stacks) {
      const cross = stack === 'decoder' ? series('init', subPoints(stack, 'cross', 'branch_ratio'), dashed, ' (cross-attention)') : [];
      layerChartCard(box, `${name}: branch-to-stream ratio by ${stack} layer at initialization`,
        'Mean over real tokens of ||F_l(x)|| / ||x_l|| for the self-attention (solid)' + (cross.length ? ', cross-attention (dashed)' : '') +
        ' and FFN (dotted) sub-layers.',
        {type: 'line', data: {datasets: [...series('init', subPoints(stack, 'attn', 'branch_ratio')), ...cross,
                                         ...series('init', subPoints(stack, 'mlp', 'branch_ratio'), dotted, ' (FFN)')]},
         options: {scales: {x: layerAxis(`${stack} layer`), y: axis('||F|| / ||x||', 'logarithmic')}}});
    }
    // attention ||A||_2 per layer, the max over heads, for each kind of attention
    const kinds = [['encoder', 'self', 'Encoder self-attention', 'encoder layer'],
                   ['decoder', 'self', 'Decoder self-attention (causal)', 'decoder layer'],
                   ['decoder', 'cross', 'Cross-attention (decoder queries over the source)', 'decoder layer']];
    for (const [stack, kind, title, xTitle] of kinds)
      for (const [when, stageName] of stages) {
        const heads = (rep) => rep.attention.per_head.filter((h) => h.stack === stack && h.kind === kind);
        const sets = series(when, (rep) => {
          const max = {};
          for (const h of heads(rep)) max[h.layer] = Math.max(max[h.layer] || 0, h.norm2);
          return Object.keys(max).map((l) => ({x: Number(l), y: max[l]}));
        });
        const rows = Math.max(0, ...probed.filter(([r]) => r.instruments[when]).flatMap(([r]) => heads(r.instruments[when]).map((h) => h.rows)));
        const top = Math.max(0, ...sets.flatMap((d) => d.data.map((p) => p.x)));
        if (sets.length) sets.push({label: '√rows (upper bound)', data: [{x: 0, y: Math.sqrt(rows)}, {x: top, y: Math.sqrt(rows)}],
                                    borderColor: '#888', borderDash: [3, 3], borderWidth: 1, pointRadius: 0});
        layerChartCard(box, `${title}: ||A||_2 by layer ${stageName} (max over heads)`,
          `On the single probe pair (${rows} query rows): ||A||_2 <= √(c_max) <= √rows for a row-stochastic matrix` +
          (kind === 'cross' ? ', and >= √(rows / keys), which need not reach 1 (source 002, docs/SOURCES.md).' : ', and >= 1 (source 002, docs/SOURCES.md).'),
          {type: 'line', data: {datasets: sets}, options: {scales: {x: layerAxis(xTitle), y: axis('||A||_2')}}});
      }
    // the Jacobians: the decoder's and the source's spectra, then their extremes per run and stage
    const spectrum = (e) => e.dense ? e.dense.singular_values.map((v, k) => ({x: k + 1, y: Math.max(v, 1e-18)})) : [];
    const jacobians = [['decoder', 'the decoder\'s input stream, the encoder output held fixed'],
                       ['source', 'the encoder\'s input stream, through both stacks and every cross-attention']];
    for (const [name, by] of jacobians)
      for (const [when, stageName] of stages)
        chartCard(box, `Singular values of the ${name} Jacobian ${stageName}`,
          `The decoder's last stream (before its final norm) by ${by}, on the single probe pair, dense, in double precision.`,
          {type: 'line', data: {datasets: series(when, (rep) => spectrum(rep.jacobian[name]))},
           options: {scales: {x: axis('index'), y: axis('singular value', 'logarithmic')}}}, {logToggle: true});
    const extremes = (e) => e.dense ? [e.dense.sigma_max, e.dense.sigma_min, `dense, rank ${e.dense.rank} of ${e.dense.singular_values.length}`]
      : e.lanczos.largest.length ? [e.lanczos.largest[0], e.lanczos.smallest[0], e.lanczos.converged ? 'matrix-free' : 'matrix-free, not converged']
      : [null, null, 'not computed (see Not measured)'];
    const t = el('table', {id: 'encdec-jacobians'});
    t.append(el('tr', {}, ...['run', 'model', 'decoder σ_max', 'decoder σ_min', 'source σ_max', 'source σ_min', 'how']
      .map((h, k) => el('th', {class: k < 2 || k === 6 ? 'text' : ''}, h))));
    for (const [when, stageName] of stages)
      for (const [run] of probed.filter(([r]) => r.instruments[when])) {
        const j = run.instruments[when].jacobian;
        const [dMax, dMin, dHow] = extremes(j.decoder), [sMax, sMin, sHow] = extremes(j.source);
        t.append(el('tr', {}, el('td', {class: 'text'}, run.label), el('td', {class: 'text'}, stageName),
                    el('td', {}, fmt(dMax, 4)), el('td', {}, dMin == null ? '-' : dMin.toExponential(2)),
                    el('td', {}, fmt(sMax, 4)), el('td', {}, sMin == null ? '-' : sMin.toExponential(2)),
                    el('td', {class: 'text'}, dHow === sHow ? dHow : `decoder ${dHow}; source ${sHow}`)));
      }
    parent.append(el('h3', {}, 'Encoder-decoder Jacobians'));
    parent.append(el('p', {class: 'meta'}, 'Of the decoder\'s last stream (before its final norm) on the single probe pair: by the ' +
      'decoder\'s input stream with the encoder output held fixed ("decoder"), and by the encoder\'s input stream through both ' +
      'stacks and every cross-attention ("source"): the largest and smallest singular values (the smallest includes the ' +
      'structural zeros of the final norm).'));
    parent.append(t);
  }

  // ---- instruments ----
  // encoder-decoder runs are drawn per stack (encdecInstruments above); the charts here take the others
  const probed = runs.map((r, i) => [r, i]).filter(([r]) => r.instruments && r.instruments.init && !isEncdecProbe(r));
  const probedEncdec = runs.map((r, i) => [r, i]).filter(([r]) => isEncdecProbe(r));
  // what 'init' means: at initialization, or as loaded (a pretrained model); 'final' only if trained
  const atInit = study.kind === 'pretrained' ? 'as loaded' : 'at initialization';
  const stages = [['init', atInit], ['final', 'after training']].filter(([when]) => probed.some(([r]) => r.instruments[when]));
  root.append(el('h2', {}, 'Instruments'));
  const unprobed = runs.filter((r) => r.skipped && r.skipped.instruments);
  if (!probed.length && !probedEncdec.length) root.append(el('p', {class: 'meta'}, unprobed.length
    ? 'Not run: ' + unprobed[0].skipped.instruments + (unprobed.length === runs.length ? ' (every run).' : ' (' + unprobed.map((r) => r.label).join(', ') + ').')
    : 'The instruments were off in this study (study.instruments = false) or no run got that far.'));
  if (probed.length) {  // no instrument charts when no run was probed
    root.append(legend());
    const instruments = el('div', {class: 'grid'});
    root.append(instruments);
    const T = probed.length ? probed[0][0].instruments.init.T : 0;
    function byLayer(when, pick, extra) {
      return probed.filter(([r]) => r.instruments[when]).map(([run, i]) =>
        lineSet(run, i, pick(run.instruments[when]), Object.assign({pointRadius: 2}, extra || {})));
    }
    const layerPoints = (rep, key) => rep.dynamics.layers.map((l) => ({x: l.layer, y: l[key]}));
    if (probed.some(([r]) => r.instruments.init.dynamics.has_loss !== false)) chartCard(instruments, `Gradient norm by layer ${atInit}`,
              'Norm of the gradient of each layer\'s parameters (solid) and of its FFN output weights W2 alone (dotted, same colour; the quantity Xiong et al. 2020 analyse: grows toward the output for Post-LN, flat for Pre-LN), mean over 2 validation batches.',
              {type: 'line', data: {datasets: [
                ...byLayer('init', (rep) => layerPoints(rep, 'grad_norm')),
                ...byLayer('init', (rep) => layerPoints(rep, 'ffn_out_grad_norm').filter((p) => p.y != null), {borderDash: [2, 3]})
                  .filter((d) => d.data.length).map((d) => Object.assign(d, {label: d.label + ' (W2)'})),
              ]},
               options: {scales: {x: axis('layer'), y: axis('||dL/dθ_l||', 'logarithmic')}}}, {logToggle: true});
    const streamPoints = (rep) => [...layerPoints(rep, 'stream_norm'), {x: rep.dynamics.layers.length, y: rep.dynamics.final_stream_norm}];
    for (const [when, name] of stages)
      chartCard(instruments, `Activation norm by depth ${name}`,
                'Mean over tokens of ||x_l||, the residual stream entering layer l (the last point is the stream leaving the last layer).',
                {type: 'line', data: {datasets: byLayer(when, streamPoints)},
                 options: {scales: {x: axis('depth l'), y: axis('||x_l||', 'logarithmic')}}}, {logToggle: true});
    chartCard(instruments, `Branch-to-stream ratio by layer ${atInit}`,
              'Mean over tokens of ||F_l(x)|| / ||x_l|| for the attention (solid) and FFN (dotted, same colour) sub-layers.',
              {type: 'line', data: {datasets: [
                ...byLayer('init', (rep) => layerPoints(rep, 'attn_branch_ratio')),
                ...byLayer('init', (rep) => layerPoints(rep, 'mlp_branch_ratio'), {borderDash: [2, 3]}).map((d) => Object.assign(d, {label: d.label + ' (FFN)'})),
              ]}, options: {scales: {x: axis('layer'), y: axis('||F|| / ||x||', 'logarithmic')}}}, {logToggle: true});
    const collapsePoints = (skips, mlp) => (rep) => {
      const v = (rep.dynamics.rank_collapse || []).find((c) => c.skips === skips && c.mlp === mlp);
      return v ? v.residual_rank.map((y, l) => ({x: l, y: Math.max(y, 1e-18)})) : [];
    };
    if (probed.some(([r]) => r.instruments.init.dynamics.rank_collapse))
      chartCard(instruments, `Rank collapse res(X_l) by layer ${atInit}`,
                'res(X) = ||X - 1 mean(X)^T|| / ||X|| of the stream entering layer l, for each model (solid) and for the same weights as pure attention, without skips and MLPs (dotted, same colour): Dong et al. 2021 predict collapse to rank one without skips.',
                {type: 'line', data: {datasets: [
                  ...byLayer('init', collapsePoints(true, true)),
                  ...byLayer('init', collapsePoints(false, false), {borderDash: [2, 3]}).map((d) => Object.assign(d, {label: d.label + ' (pure attention)'})),
                ]}, options: {scales: {x: axis('depth l'), y: axis('res(X_l)', 'logarithmic')}}}, {logToggle: true});
    const spectrumPoints = (sv) => sv.map((v, k) => ({x: k + 1, y: Math.max(v, 1e-18)}));
    chartCard(instruments, `Singular values of the end-to-end token-local Jacobian ${atInit}`,
              `dy_T/dx_T through all layers at the last token of a ${T}-token validation sequence, in double precision.`,
              {type: 'line', data: {datasets: byLayer('init', (rep) => spectrumPoints(rep.jacobian.end_to_end.token_local.singular_values))},
               options: {scales: {x: axis('index'), y: axis('singular value', 'logarithmic')}}}, {logToggle: true});
    chartCard(instruments, `Singular values of the first LayerNorm site ${atInit}`,
              'Closed-form norm Jacobian at h.0 (checked against autodiff): d-2 equal values 1/s and the eps direction for LayerNorm at eps > 0; the last is the exact zero of the all-ones direction.',
              {type: 'line', data: {datasets: byLayer('init', (rep) => rep.jacobian.norm_sites.length ? spectrumPoints(rep.jacobian.norm_sites[0].spectrum.singular_values) : [])},
               options: {scales: {x: axis('index'), y: axis('singular value', 'logarithmic')}}}, {logToggle: true});
    for (const [when, name] of stages)
      chartCard(instruments, `Block Jacobian σ_max and σ_min by layer ${name}`,
                'Token-local Jacobian of each block (dy_i/dx_i): σ_max solid, σ_min dotted.',
                {type: 'line', data: {datasets: [
                  ...byLayer(when, (rep) => rep.jacobian.blocks.map((b) => ({x: b.layer, y: b.token_local.singular_values[0]}))),
                  ...byLayer(when, (rep) => rep.jacobian.blocks.map((b) => ({x: b.layer, y: Math.max(b.token_local.sigma_min, 1e-18)})),
                             {borderDash: [2, 3]}).map((d) => Object.assign(d, {label: d.label + ' σ_min'})),
                ]}, options: {scales: {x: axis('layer'), y: axis('singular value', 'logarithmic')}}}, {logToggle: true});
    function attentionByLayer(rep) {
      const max = {};
      for (const h of rep.attention.per_head) max[h.layer] = Math.max(max[h.layer] || 0, h.norm2);
      return Object.keys(max).map((l) => ({x: Number(l), y: max[l]}));
    }
    for (const [when, name] of stages) {
      const sets = byLayer(when, attentionByLayer);
      if (sets.length) sets.push({label: '√n (upper bound)', data: [{x: 0, y: Math.sqrt(T)}, {x: Math.max(...sets.flatMap((s) => s.data.map((p) => p.x))), y: Math.sqrt(T)}],
                                  borderColor: '#888', borderDash: [3, 3], borderWidth: 1, pointRadius: 0});
      chartCard(instruments, `Attention spectral norm ||A||_2 by layer ${name} (max over heads)`,
                `Attention on a ${T}-token sequence: 1 <= ||A||_2 <= √(c_max) <= √n (source 002, docs/SOURCES.md).`,
                {type: 'line', data: {datasets: sets}, options: {scales: {x: axis('layer'), y: axis('||A||_2')}}}, {logToggle: true});
    }
  }

  if (probedEncdec.length) encdecInstruments(root, probedEncdec);

  // ---- theory ----
  if (data.theory) {
    root.append(el('h2', {}, 'Theory claims'));
    root.append(el('p', {class: 'meta'}, study.kind === 'pretrained'
      ? 'Decided from each model\'s own instrument readings above (the numbers behind each verdict are in results.json).'
      : 'Measured by normlab theory, each claim in the setting its source states, on fresh models over several seeds and on the same models trained on the built-in corpus; statements about initialization only are measured on fresh models. A claim holds (is violated) when the 95% confidence interval of its quantity over the seeds lies inside (outside) the claimed region, else it is not distinguishable at this scale. The claims in words: docs/THEORY.md; every seed\'s numbers: results.json.'));
    const t = el('table');
    t.append(el('tr', {}, ...['source', 'models', 'claim', 'setting', 'measured', 'verdict'].map((h) => el('th', {class: 'text'}, h))));
    for (const c of data.theory) {
      const kind = c.verdict.startsWith('violated') ? 'violated' : c.verdict.startsWith('holds only') ? 'conditional'
                 : c.verdict.startsWith('holds') ? 'holds' : 'other';
      t.append(el('tr', {}, el('td', {class: 'text'}, c.source), el('td', {class: 'text'}, c.model || 'fresh'),
                  el('td', {class: 'text'}, c.statement + (c.reported ? ' (the paper: ' + c.reported + ')' : '')),
                  el('td', {class: 'text'}, c.setting || ''),
                  el('td', {class: 'text'}, c.measured), el('td', {class: 'text verdict-' + kind}, c.verdict)));
    }
    root.append(t);
  }
  root.append(el('p', {class: 'meta'}, 'Charts drawn with Chart.js ' + Chart.version + ' (MIT license), inlined in this file.'));

  document.getElementById('normlab-selftest').textContent = JSON.stringify(check);
})();
