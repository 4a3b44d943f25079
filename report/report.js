// report.js: draws a normlab study report from the inlined results.json with Chart.js: the answer in
// three sentences and the detailed summary, what was not measured and why, the run table (with BLEU
// for translation runs), the mean and spread over seeds per setting, final validation loss against
// learning rate per placement, BLEU by run, loss curves with divergence and spike markers, the
// instruments' readings by layer (gradient norms, activation norms, branch ratios, Jacobian spectra,
// attention spectral norms) and the theory claims. Runs that differ only in their seed are drawn as
// one setting: the mean over seeds with a band from the lowest to the highest seed; more than
// kPanelMax settings on one chart become small multiples, one panel per placement (or per value of
// another varied key). It records what it drew in #normlab-selftest for the headless-browser test.
// Two parts live in their own files and are inserted by normlab at their NORMLAB:PART markers:
// report_encdec.js (encoder-decoder runs per stack) and report_layers.js (per-layer logs of training).
'use strict';

(function () {
  const data = JSON.parse(document.getElementById('normlab-data').textContent);
  const root = document.getElementById('report');
  const check = window.normlabCheck;
  Object.assign(check, {titles: [], panels: 0, bands: 0});  // what was drawn: chart titles, panels of small multiples, seed bands
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

  // ---- settings: runs that differ only in their seed; each gets one colour ----
  const seedKeys = varying.filter((k) => k === 'train.seed' || k === 'model.seed');
  const otherKeys = varying.filter((k) => !seedKeys.includes(k));
  // a key's value for a run: its grid entry, else its config (undefined when the run has neither)
  function gridValue(run, key) {
    if (run.grid && key in run.grid) return run.grid[key];
    const section = run.config && run.config[key.slice(0, key.indexOf('.'))];
    return section ? section[shortKey(key)] : undefined;
  }
  // as the C++ names values (study/results_view.h text_of): "" is "none" (a fresh model beside runs
  // that start from a checkpoint: train.init_from = "")
  const valueText = (v) => v === undefined ? '?' : v === '' ? 'none' : JSON.stringify(v).replace(/"/g, '');
  // A shaded band between two curves: two datasets, the second filled down to the first; tooltips skip
  // them (band: true)
  const bandSets = (lo, hi, colour, loLabel, hiLabel) => [
    {label: loLabel, data: lo, borderWidth: 0, pointRadius: 0, fill: false, band: true},
    {label: hiLabel, data: hi, borderWidth: 0, pointRadius: 0, fill: '-1', backgroundColor: colour + '30', band: true}];
  const signatureOf = (run, keys) => keys.map((k) => keyText(k) + '=' + valueText(gridValue(run, k))).join(' ');
  const settings = [];  // {name, runs: [run index], placement, colour}
  const settingOf = runs.map((run, i) => {
    const name = signatureOf(run, otherKeys) || 'all runs';
    let s = settings.find((x) => x.name === name);
    if (!s) settings.push(s = {name, runs: [], placement: valueText(gridValue(run, 'model.placement'))});
    s.runs.push(i);
    return s;
  });
  // colours: a family of shades per placement when the placement varies (its first setting the
  // darkest), else one colour per setting
  const placementShades = {post: ['#d62728', '#f28e84', '#8c1c13', '#f4b6ae'], pre: ['#1f77b4', '#7fb8e0', '#0b4f83', '#b5d5ee'],
    sandwich: ['#2ca02c', '#8fd184', '#11661a', '#c1e8b9'], deepnorm: ['#9467bd', '#c3a9e0', '#5c3589', '#e0d2f0'],
    prepost: ['#ff7f0e', '#ffb874', '#a64b00', '#ffd9b0'], none: ['#7f7f7f', '#b5b5b5', '#454545', '#d6d6d6'],
    admin: ['#8c564b', '#c49a90', '#55302a', '#e1cbc6'], residual: ['#e377c2', '#f2b4df', '#a1327f', '#f9dcef'],
    rezero: ['#17becf', '#84dde6', '#0b7b87', '#c0eef3'], skipinit: ['#bcbd22', '#dcdc7a', '#777812', '#eeeeba'],
    layerscale: ['#393b79', '#7b7fc4', '#20214a', '#b9bbe3'], tfixup: ['#637939', '#a2b877', '#3b4a20', '#d0dcba']};
  const palette = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#17becf',
                   '#bcbd22', '#7f7f7f'];
  const byPlacement = otherKeys.includes('model.placement');
  settings.forEach((s, k) => {
    const shades = placementShades[s.placement];
    const nth = settings.slice(0, k).filter((o) => o.placement === s.placement).length;
    s.colour = byPlacement && shades ? shades[nth % shades.length] : palette[k % palette.length];
  });
  const style = runs.map((run, i) => ({colour: settingOf[i].colour, dash: []}));
  const kPanelMax = 4;  // more settings than this on one chart: small multiples

  // ---- charts ----
  Chart.defaults.animation = false;
  Chart.defaults.font.size = 11;
  Chart.defaults.plugins.legend.display = false;  // one legend for every chart: legend() below

  // One unit for the residual stream everywhere in the report, as in the instruments and the per-layer
  // logs: RMS over channels per token (stream_rms).
  const streamUnit = 'RMS(x) = ||x|| / √d';
  // Text drawn on a canvas by hand (heatmaps, colour bars): aligned as asked, but moved inside the
  // canvas when it would run over an edge; what still does not fit is recorded for the browser test.
  function fitText(ctx, text, x, y) {
    const w = ctx.measureText(text).width, W = ctx.canvas.width;
    const left = ctx.textAlign === 'center' ? x - w / 2 : ctx.textAlign === 'right' ? x - w : x;
    const shifted = Math.min(Math.max(left, 0), W - w);
    if (w > W) check.clippedText = (check.clippedText || []).concat([text]);
    ctx.fillText(text, x + (shifted - left), y);
  }
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
    check.titles.push(title);
    check.bands += config.data.datasets.filter((d) => d.band).length / 2;
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
  // an axis of layers, depths or indices: integer ticks only
  const layerAxis = (title) => ({type: 'linear', title: {display: true, text: title},
                                 ticks: {stepSize: 1, precision: 0, callback: (v) => Number.isInteger(v) ? String(v) : ''}});

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
  if (data.running) root.append(el('div', {class: 'banner'}, 'Running: a snapshot of the study so far, written again after each run; reload to update.'));
  if (data.headline && data.headline.length) {
    root.append(el('h2', {}, 'The answer'));
    root.append(el('p', {class: 'headline', id: 'headline'}, data.headline.join(' ')));
  }

  // ---- published results next to normlab's (results.json: reproductions; src/study/reproduce.h) ----
  const repro = data.reproductions || [];
  if (repro.length) {
    root.append(el('h2', {}, 'Reproductions'));
    root.append(el('p', {class: 'lead'}, 'Each published result next to the same comparison in this study. The verdict ' +
      'is decided by the 95% interval of a − b over seeds (paired by seed when both sides ran the same seeds): ' +
      '"holds" when it lies on the claimed side of 0, "violated" on the other, else "not distinguishable at this scale". ' +
      'A side whose every run diverged counts as the worse one.'));
    const t = el('table', {id: 'reproductions'});
    t.append(el('tr', {}, ...['claim', 'source', 'the source\'s numbers', 'the claim here (a vs b)', 'normlab', 'verdict']
      .map(h => el('th', {class: 'text'}, h))));
    for (const r of repro) {
      const metricName = {bleu: 'BLEU', lowest_val_loss: 'lowest val loss', test_loss: 'test loss at the end',
                          val_loss: 'final val loss', lr_sensitivity: 'LR sensitivity over the swept rates',
                          max_attn_logit: 'largest attention logit', abs_log_z: 'largest |mean log Z|'};
      const metric = metricName[r.metric] || 'final val loss';
      const keys = (r.best_of || []).map(k => k.split('.').pop());
      const claimed = `${r.a.label} ${r.expect === 'a < b' ? '<' : '>'} ${r.b.label} (${metric}` +
                      `${keys.length ? ', each at its best ' + keys.join(' and ') : r.best_lr ? ', each at its best lr' : ''}` +
                      `${r.select && r.select !== r.metric ? ' by ' + (metricName[r.select] || r.select) : ''})`;
      const measured = el('td', {class: 'text'}, r.measured);
      if (r.gap_by_step_text) measured.append(el('div', {class: 'gap-by-step'}, r.gap_by_step_text));  // the gap against steps
      t.append(el('tr', {}, el('td', {class: 'text'}, r.claim), el('td', {class: 'text'}, r.source),
                  el('td', {class: 'text'}, r.paper), el('td', {class: 'text'}, claimed),
                  measured, el('td', {class: 'text verdict-' + ({holds: 'holds', violated: 'violated'}[r.verdict] || 'conditional')}, r.verdict)));
    }
    root.append(t);
    gapCharts(repro);
  }
  // The gap a − b against training steps, one chart per reproduction with a loss metric (gap_by_step:
  // the paired mean at every evaluation step and its 95% interval over seeds where both sides have two).
  function gapCharts(reproductions) {
    const box = el('div', {class: 'grid', id: 'gap-by-step'});
    root.append(box);  // in the page before the charts are made: Chart.js sizes a canvas by its parent
    for (const r of reproductions) {
      const gaps = (r.gap_by_step || []).filter((g) => typeof g.mean === 'number' && isFinite(g.mean));
      if (gaps.length < 2) continue;
      const points = (field) => gaps.filter((g) => typeof g[field] === 'number').map((g) => ({x: g.step, y: g[field]}));
      const lowest = r.metric === 'lowest_val_loss';
      const colour = '#1f77b4';
      const sets = [];
      const lo = points('lo'), hi = points('hi');
      if (lo.length >= 2) sets.push(...bandSets(lo, hi, colour, '95% interval, low end', '95% interval, high end'));
      sets.push({label: 'a − b', data: points('mean'), borderColor: colour, backgroundColor: colour, borderWidth: 1.6,
                 pointRadius: 0, tension: 0});
      const first = gaps[0].step, last = gaps[gaps.length - 1].step;
      sets.push({label: 'no difference', data: [{x: first, y: 0}, {x: last, y: 0}], borderColor: '#6b7380',
                 backgroundColor: '#6b7380', borderDash: [4, 4], borderWidth: 1, pointRadius: 0});
      const note = `a = ${r.a.label}, b = ${r.b.label}, each at the setting the table names. At each evaluation step the ` +
        `difference of ${lowest ? 'each run\'s lowest validation loss so far' : 'the validation losses'} (a run stopped ` +
        `earlier, at its plateau, keeps its last), paired by seed; the band is its 95% interval over seeds where both ` +
        `sides have two or more. Below 0: a is lower.`;
      chartCard(box, `a − b against training steps: ${r.a.label} vs ${r.b.label}`, note,
                {type: 'line', data: {datasets: sets},
                 options: {scales: {x: axis('training step'), y: axis(`a − b, ${lowest ? 'lowest ' : ''}validation loss (nats)`)},
                           plugins: {tooltip: {filter: (item) => !item.dataset.band}}}});
    }
    if (!box.children.length) box.remove();
  }
  root.append(el('h2', {}, data.headline && data.headline.length ? 'In detail' : 'What happened'));
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
                   'steps to target', 'spike score (loss / grad norm)', 'tokens/s', 'grad norm last/first layer at init', 'time (s)'];
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
      el('td', {}, typeof s.spike_score_loss === 'number' ? `${fmt(100 * s.spike_score_loss, 2)}% / ${fmt(100 * s.spike_score_grad_norm, 2)}%` : '-'),
      el('td', {}, fmt(s.tokens_per_s, 0)),
      el('td', {}, init ? gradRatioText(init) : '-'),
      el('td', {}, fmt(s.seconds, 1)),
    ];
    table.append(el('tr', {}, ...cells));
  }
  root.append(table);
  root.append(el('p', {class: 'meta'}, 'Spike score: the share of a run\'s steps whose training loss (gradient norm) exceeds the ' +
      'mean of the previous 128 steps\' by more than 6 of their standard deviations (OLMo 2\'s measure, by the rule of the ' +
      'OLMo team\'s training code); "-" for a run of fewer than 128 steps, or one written before normlab recorded it.'));
  // what the runs trained on (results.json: run.input), once when every run shares it
  const inputs = [...new Set(runs.map((r) => r.input).filter(Boolean))];
  if (inputs.length === 1) root.append(el('p', {class: 'meta', id: 'input'}, `Input of every run: ${inputs[0]}.`));
  else if (inputs.length > 1) root.append(el('p', {class: 'meta', id: 'input'}, 'Inputs: ' +
      runs.filter((r) => r.input).map((r) => `${r.label}: ${r.input}`).join('; ') + '.'));
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

  // ---- LR sensitivity of a learning-rate sweep (results.json: lr_sensitivity) ----
  const sens = (data.lr_sensitivity || []).filter(e => e.sensitivity);
  if (sens.length) {
    root.append(el('h2', {}, 'Learning-rate sensitivity'));
    const t = el('table', {id: 'lr-sensitivity'});
    const head = ['setting', 'seeds', 'LR sensitivity (nats)', '95% interval', 'best lr (mean curve)', 'best lr by seed',
                  'mean clipped loss by lr', 'largest attention logit by lr', 'largest |mean log Z| by lr'];
    const byRate = (e, key) => (e.signals && e.signals[key] || []).map((v, k) => `${e.rates[k]}: ${v == null ? '-' : fmt(v, 3)}`).join('; ');
    t.append(el('tr', {}, ...head.map((h, k) => el('th', {class: k < 1 || k > 4 ? 'text' : ''}, h))));
    for (const e of sens) {
      const s = e.sensitivity;
      const nowhere = e.learned_nowhere ? ' (learned at no rate: not robustness)' : '';
      t.append(el('tr', {}, el('td', {class: 'text'}, e.setting), el('td', {}, String(s.n)), el('td', {}, fmt(s.mean, 4) + nowhere),
                  el('td', {}, s.lo == null ? 'one seed' : `${fmt(s.lo, 4)} to ${fmt(s.hi, 4)}`),
                  el('td', {}, String(e.best_lr)), el('td', {class: 'text'}, e.best_lr_by_seed.join(', ')),
                  el('td', {class: 'text'}, e.curve.map(p => `${p.lr}: ${fmt(p.loss, 4)}`).join('; ')),
                  el('td', {class: 'text'}, byRate(e, 'max_attn_logit')), el('td', {class: 'text'}, byRate(e, 'abs_log_z'))));
    }
    root.append(t);
    root.append(el('p', {class: 'meta'}, 'Wortsman et al. 2023: per seed, the mean over the swept rates of the final ' +
        'validation loss, each clipped at the loss the run started from (a diverged run counts as that loss), minus the ' +
        'seed\'s lowest; the interval is the 95% Student-t interval over the seeds that ran every rate. A setting ' +
        'that learned at no rate (every final loss at the unigram entropy) has a flat curve and a sensitivity near 0 ' +
        'that says nothing about robustness.'));
  }

  // ---- which signal moved first, against the best rate's run (results.json: onsets) ----
  const onsets = (data.onsets || []).filter(e => e.runs.some(r => r.loss_behind_step != null));
  if (onsets.length) {
    root.append(el('h2', {}, 'Which signal moved first'));
    const names = {max_attn_logit: 'largest attention logit', abs_log_z: '|mean log Z|', grad_norm: 'gradient norm'};
    const t = el('table', {id: 'onsets'});
    t.append(el('tr', {}, ...['setting', 'seed', 'lr', 'best lr', 'outcome', 'loss fell behind at step',
                              ...Object.values(names).map(n => `${n}: left range at step (lead: order)`)].map(h => el('th', {class: 'text'}, h))));
    for (const e of onsets)
      for (const r of e.runs) {
        const cell = key => {
          const x = r.signals[key];
          if (x == null) return 'not logged';
          const order = {before: 'first', after: 'after the loss', never: 'never', unresolved: 'too close to order'}[x.order] || '';
          if (x.onset_step == null) return `stayed in range (${order || 'never'})`;
          return x.lead == null ? String(x.onset_step) : `${x.onset_step} (${x.lead > 0 ? '+' : ''}${x.lead}: ${order})`;
        };
        t.append(el('tr', {}, el('td', {class: 'text'}, e.setting), el('td', {class: 'text'}, r.seed), el('td', {}, String(r.lr)),
                    el('td', {}, String(r.best_lr)), el('td', {class: 'text'}, r.outcome),
                    el('td', {}, r.loss_behind_step == null ? '-' : String(r.loss_behind_step)),
                    ...Object.keys(names).map(k => el('td', {class: 'text'}, cell(k)))));
      }
    root.append(t);
    const every = onsets[0];
    root.append(el('p', {class: 'meta'}, 'Each run above its seed\'s best rate against the run at the best rate (the same ' +
        'initialization and batches). The loss fell behind at the first step from which its training loss stays above ' +
        'the reference\'s; a signal left the range at the first step it logged more than the largest value the ' +
        'reference logged in its whole run; the lead (in parentheses) is the loss\'s step minus the signal\'s. The ' +
        'signal moved first when that step is at or before the last step its loss was level; after the loss, when it ' +
        'was still in range at a logged step its loss was already behind; too close to order when both moments fall ' +
        'between the same two logged steps.' + (every.layer_log_every != null && every.train_log_every != null
          ? ` The per-layer log is every ${every.layer_log_every} steps and the loss every ${every.train_log_every}.` : '')));
  }

  // One legend for all charts: a swatch per setting in its colour (with seeds: the mean line and its band).
  function legend() {
    const box = el('div', {class: 'legend'});
    for (const s of settings) {
      const swatch = el('canvas', {width: 36, height: 10});
      const ctx = swatch.getContext('2d');
      if (seedKeys.length) {
        ctx.fillStyle = s.colour + '40';
        ctx.fillRect(0, 1, 36, 8);
      }
      ctx.strokeStyle = s.colour;
      ctx.lineWidth = 2.5;
      ctx.beginPath();
      ctx.moveTo(0, 5);
      ctx.lineTo(36, 5);
      ctx.stroke();
      box.append(el('span', {class: 'item'}, swatch, ' ' + s.name + (s.runs.length > 1 ? ` (${s.runs.length} seeds)` : '')));
    }
    if (seedKeys.length) box.append(el('span', {class: 'item meta'}, `lines: the mean over the seeds (${seedKeys.map(keyText).join(', ')}); bands: lowest to highest seed`));
    return box;
  }

  // ---- series over settings: mean over seeds with a min-max band; small multiples ----
  // perRun(run, i) -> [{x, y}] or null. Returns one {setting, mean, lo, hi, banded} per setting with data.
  function aggregate(perRun) {
    const points = runs.map((run, i) => perRun(run, i) || []);
    const out = [];
    for (const s of settings) {
      const byX = new Map();
      for (const i of s.runs)
        for (const p of points[i]) {
          if (typeof p.y !== 'number' || !isFinite(p.y)) continue;
          if (!byX.has(p.x)) byX.set(p.x, []);
          byX.get(p.x).push(p.y);
        }
      if (!byX.size) continue;
      const xs = [...byX.keys()].sort((a, b) => a - b);
      const at = (f) => xs.map((x) => ({x, y: f(byX.get(x))}));
      out.push({setting: s, mean: at((v) => v.reduce((a, b) => a + b, 0) / v.length),
                lo: at((v) => Math.min(...v)), hi: at((v) => Math.max(...v)),
                banded: xs.some((x) => byX.get(x).length > 1)});
    }
    return out;
  }
  // The datasets of one aggregated series: the band (lowest and highest seed, filled between) and the
  // mean line. `variant` {dash, suffix, extra} tells a second quantity of the same setting apart.
  function seriesSets(series, variant, maxPoints) {
    const v = variant || {};
    const th = (pts) => thin(pts, maxPoints || 1500);
    const sets = [];
    if (series.banded && !v.noBand)
      sets.push(...bandSets(th(series.lo), th(series.hi), series.setting.colour, series.setting.name + ' lowest seed',
                            series.setting.name + ' highest seed'));
    sets.push(Object.assign({label: series.setting.name + (v.suffix || ''), data: th(series.mean), borderColor: series.setting.colour,
                             backgroundColor: series.setting.colour, borderDash: v.dash || [], borderWidth: 1.6,
                             pointRadius: 0, tension: 0}, v.extra || {}));
    return sets;
  }
  // The key whose values make the panels of small multiples: the placement, else the first varied key
  // with more than one value among the settings.
  const panelKey = (() => {
    const keys = otherKeys.filter((k) => new Set(settings.map((s) => valueText(gridValue(runs[s.runs[0]], k)))).size > 1);
    return keys.includes('model.placement') ? 'model.placement' : keys[0];
  })();
  const panelOf = (setting) => panelKey ? keyText(panelKey) + '=' + valueText(gridValue(runs[setting.runs[0]], panelKey)) : '';
  // A chart of settings: spec = {variants: [{pick(run, i) -> points, dash, suffix, extra, noBand}], x, y (axes),
  // extra(settingsShown) -> more datasets (markers, reference lines), logToggle, maxPoints}. One chart when
  // at most kPanelMax settings have data, else one small panel per value of panelKey on a shared y range.
  function settingsChart(parent, title, note, spec) {
    const perVariant = spec.variants.map((v) => ({v, series: aggregate(v.pick)}));
    const shown = settings.filter((s) => perVariant.some(({series}) => series.some((x) => x.setting === s)));
    const build = (subset) => [
      ...perVariant.flatMap(({v, series}) => series.filter((x) => subset.includes(x.setting)).flatMap((x) => seriesSets(x, v, spec.maxPoints))),
      ...(spec.extra ? spec.extra(subset) : [])];
    const options = {scales: {x: spec.x, y: spec.y}};
    if (spec.legendFilter !== false) options.plugins = {tooltip: {filter: (item) => !item.dataset.band}};
    if (shown.length <= kPanelMax || !panelKey)
      return chartCard(parent, title, note, {type: 'line', data: {datasets: build(shown)}, options}, {logToggle: spec.logToggle});
    const panels = [];
    for (const s of shown) {
      const name = panelOf(s);
      let p = panels.find((x) => x.name === name);
      if (!p) panels.push(p = {name, settings: []});
      p.settings.push(s);
    }
    return panelCard(parent, title, note, panels.map((p) => ({name: p.name, datasets: build(p.settings)})), spec);
  }
  // A card of small multiples: one small chart per panel, all on the y range of the whole card.
  function panelCard(parent, title, note, panels, spec) {
    const card = el('div', {class: 'card wide'});
    card.append(el('h3', {}, title + ' (one panel per ' + (spec.panelBy || keyText(panelKey)) + ')'));
    const row = el('div', {class: 'panels'});
    card.append(row);
    if (note) card.append(el('p', {class: 'note'}, note));
    parent.append(card);
    const log = spec.y.type === 'logarithmic';
    const ys = panels.flatMap((p) => p.datasets.flatMap((d) => d.data.map((q) => q.y)))
      .filter((y) => typeof y === 'number' && isFinite(y) && (!log || y > 0));
    const xs = panels.flatMap((p) => p.datasets.flatMap((d) => d.data.map((q) => q.x))).filter((x) => isFinite(x));
    const charts = [];
    for (const p of panels) {
      const canvas = el('canvas', {'data-chart': title + ' / ' + p.name});
      row.append(el('div', {class: 'panel'}, el('div', {class: 'panel-title'}, p.name), el('div', {class: 'chart small'}, canvas)));
      // every panel's axes span the data of all panels (suggested bounds: Chart.js still rounds the ticks)
      const y = Object.assign({}, spec.y, ys.length ? {suggestedMin: Math.min(...ys), suggestedMax: Math.max(...ys)} : {});
      const x = Object.assign({}, spec.x, xs.length && spec.x.type !== 'logarithmic' ? {min: Math.min(...xs), max: Math.max(...xs)} : {});
      const config = {type: 'line', data: {datasets: p.datasets},
                      options: {responsive: true, maintainAspectRatio: false, parsing: false,
                                interaction: {mode: 'nearest', intersect: false}, scales: {x, y},
                                plugins: {tooltip: {filter: (item) => !item.dataset.band}}}};
      check.charts++;
      try {
        charts.push(new Chart(canvas, config));
      } catch (e) {
        check.errors.push('chart "' + title + ' / ' + p.name + '": ' + e.message);
        check.missing.push(title + ' / ' + p.name);
        continue;
      }
      if (canvasDrawn(canvas)) check.drawn++; else check.missing.push(title + ' / ' + p.name);
    }
    check.panels += panels.length;
    check.titles.push(title);
    check.bands += panels.flatMap((p) => p.datasets).filter((d) => d.band).length / 2;
    return charts;
  }

  // ---- final validation loss against the learning rate, per placement (or family of settings) ----
  // As Wortsman et al.'s figure: when the study varies the model's size (width, depth), one panel per
  // size, the other settings as lines in it.
  const lrValues = [...new Set(runs.map((r) => gridValue(r, 'train.lr')).filter((v) => typeof v === 'number'))];
  if (otherKeys.includes('train.lr') && lrValues.length > 1) {
    root.append(el('h2', {}, 'Learning rate'));
    const familyKeys = otherKeys.filter((k) => k !== 'train.lr');
    const sizeKeys = familyKeys.filter((k) => ['model.d_model', 'model.n_layers', 'model.d_ff', 'model.n_heads'].includes(k) &&
                                              new Set(runs.map((r) => valueText(gridValue(r, k)))).size > 1);
    const lineKeys = familyKeys.filter((k) => !sizeKeys.includes(k));
    const families = [];  // {name, size, colour, runs: [index]}
    const colourOf = new Map();  // a line keeps its colour in every panel
    runs.forEach((run, i) => {
      const name = signatureOf(run, lineKeys) || 'all runs', size = signatureOf(run, sizeKeys);
      if (!colourOf.has(name)) colourOf.set(name, settingOf[i].colour);
      let f = families.find((x) => x.name === name && x.size === size);
      if (!f) families.push(f = {name, size, colour: colourOf.get(name), runs: []});
      f.runs.push(i);
    });
    const finalLoss = (run) => run.status === 'finished' && run.summary && typeof run.summary.val_loss === 'number' ? run.summary.val_loss : null;
    const finite = runs.map(finalLoss).filter((v) => v !== null);
    const top = finite.length ? Math.max(...finite) + 0.08 * ((Math.max(...finite) - Math.min(...finite)) || 1) : 1;
    const setsOf = (f) => {
      const sets = [];
      const byLr = new Map();
      for (const i of f.runs) {
        const v = finalLoss(runs[i]), lr = gridValue(runs[i], 'train.lr');
        if (v === null) continue;
        if (!byLr.has(lr)) byLr.set(lr, []);
        byLr.get(lr).push(v);
      }
      const lrs = [...byLr.keys()].sort((a, b) => a - b);
      const at = (g) => lrs.map((lr) => ({x: lr, y: g(byLr.get(lr))}));
      const banded = lrs.some((lr) => byLr.get(lr).length > 1);
      if (banded)
        sets.push({label: f.name + ' lowest seed', data: at((v) => Math.min(...v)), borderWidth: 0, pointRadius: 0, fill: false, band: true},
                  {label: f.name + ' highest seed', data: at((v) => Math.max(...v)), borderWidth: 0, pointRadius: 0, fill: '-1',
                   backgroundColor: f.colour + '30', band: true});
      sets.push({label: f.name + (banded ? ' (mean over seeds)' : ''), data: at((v) => v.reduce((a, b) => a + b, 0) / v.length),
                 borderColor: f.colour, backgroundColor: f.colour, borderWidth: 2, pointRadius: 4});
      sets.push({label: f.name + ' runs', type: 'scatter', data: f.runs.filter((i) => finalLoss(runs[i]) !== null)
                   .map((i) => ({x: gridValue(runs[i], 'train.lr'), y: finalLoss(runs[i])})),
                 pointRadius: 2.5, borderColor: f.colour, backgroundColor: '#ffffff', borderWidth: 1});
      const lost = f.runs.filter((i) => runs[i].status === 'diverged');
      if (lost.length)
        sets.push({label: f.name + ' diverged', type: 'scatter', data: lost.map((i) => ({x: gridValue(runs[i], 'train.lr'), y: top})),
                   pointStyle: 'crossRot', pointRadius: 8, borderWidth: 2.5, borderColor: f.colour, backgroundColor: f.colour});
      return sets;
    };
    const x = Object.assign(axis('learning rate', 'logarithmic'), {
      // ticks at the learning rates of the study, nowhere else
      afterBuildTicks: (scale) => { scale.ticks = lrValues.slice().sort((a, b) => a - b).map((v) => ({value: v})); },
      ticks: {autoSkip: false, callback: (v) => String(+v.toPrecision(3))}});
    const y = axis(`final validation loss (nats per ${unitOf(runs[0])})`);
    const box = el('div', {class: 'grid'});
    root.append(box);
    const note = `One line per ${lineKeys.length ? lineKeys.map(keyText).join(' and ') : 'study'}: the final validation loss at each ` +
                 `learning rate (the mean over seeds, with a band from the lowest to the highest seed; small circles are single runs). ` +
                 `A cross at the top marks a run that diverged at that learning rate. The lowest point of a line is that setting at its own best learning rate.`;
    if (sizeKeys.length) {
      const sizes = [...new Set(families.map((f) => f.size))];
      panelCard(box, 'Final validation loss against learning rate', note + ' One panel per model size, on one loss axis (Wortsman et al. 2023).',
                sizes.map((size) => ({name: size, datasets: families.filter((f) => f.size === size).flatMap(setsOf)})),
                {x, y, panelBy: sizeKeys.map(keyText).join(' and ')});
    } else {
      chartCard(box, 'Final validation loss against learning rate', note,
                {type: 'line', data: {datasets: families.flatMap(setsOf)},
                 options: {scales: {x, y}, plugins: {tooltip: {filter: (item) => !item.dataset.band}}}});
    }
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
  const isTrained = (run) => run.train && run.train.step.length > 0;
  // markers in a chart of these settings: a cross where a run diverged, a triangle at a loss spike of
  // the run's own (an instability), a grey circle at a bump shared by the runs that drew the same batches
  const spikesOf = (i) => (data.spikes && data.spikes[i] && data.spikes[i].spikes) || [];
  function lossMarkers(subset) {
    const sets = [];
    for (const s of subset)
      for (const i of s.runs) {
        const run = runs[i];
        if (!isTrained(run)) continue;
        if (run.status === 'diverged') {
          const n = run.train.loss.length;
          sets.push({label: run.label + ' diverged', type: 'scatter', data: [{x: run.diverged.step, y: n ? run.train.loss[n - 1] : (run.unigram_entropy || 1)}],
                     pointStyle: 'crossRot', pointRadius: 9, borderWidth: 3, borderColor: s.colour, backgroundColor: s.colour});
        }
        const own = spikesOf(i).filter((k) => k.kind === 'own'), shared = spikesOf(i).filter((k) => k.kind === 'shared');
        if (own.length) sets.push({label: run.label + ' spike of its own', type: 'scatter', data: own.map((k) => ({x: k.step, y: k.loss})),
                                   pointStyle: 'triangle', pointRadius: 6, borderColor: s.colour, backgroundColor: s.colour});
        if (shared.length) sets.push({label: run.label + ' bump shared by the same batches', type: 'scatter',
                                      data: shared.map((k) => ({x: k.step, y: k.loss})), pointRadius: 3.5, borderColor: '#888',
                                      backgroundColor: '#ffffff', borderWidth: 1.2});
      }
    return sets;
  }
  const entropy = trained.length ? trained[0][0].unigram_entropy : null;
  const unit = trained.length ? unitOf(trained[0][0]) : 'byte';  // 'token' with data.tokenizer
  const maxStep = Math.max(1, ...trained.map(([r]) => r.train.step[r.train.step.length - 1]));
  const refSets = () => entropy ? [{label: unit + ' unigram entropy', data: [{x: 0, y: entropy}, {x: maxStep, y: entropy}],
                                    borderColor: '#888', borderDash: [3, 3], borderWidth: 1, pointRadius: 0}] : [];
  if (trained.length) {
    settingsChart(training, 'Training loss (moving average of 10 steps)',
                  `Crosses mark the step at which a run diverged (non-finite loss or gradient); triangles a loss spike of the run's own ` +
                  `(an instability: the runs that drew the same batches did not rise), grey circles a bump those runs shared (the data). ` +
                  `The dashed grey line is the corpus' ${unit} unigram entropy: a run stuck there learned only ${unit} frequencies.`,
                  {variants: [{pick: (run) => isTrained(run) ? (() => { const l = smooth(run.train.loss, 10); return run.train.step.map((s, k) => ({x: s, y: l[k]})); })() : null}],
                   extra: (subset) => [...lossMarkers(subset), ...refSets()],
                   x: axis('step'), y: axis(`loss (nats per ${unit})`), logToggle: true});
    settingsChart(training, 'Validation loss', 'Mean over the same held-out batches at every evaluation.',
                  {variants: [{pick: (run) => run.val && run.val.step.length ? run.val.step.map((s, k) => ({x: s, y: run.val.loss[k]})) : null,
                               extra: {pointRadius: 2.5}}],
                   extra: refSets, x: axis('step'), y: axis(`loss (nats per ${unit})`), logToggle: true});
    settingsChart(training, 'Gradient norm during training (before clipping)', null,
                  {variants: [{pick: (run) => isTrained(run) ? run.train.step.map((s, k) => ({x: s, y: run.train.grad_norm[k]})) : null,
                               extra: {borderWidth: 1}}],
                   x: axis('step'), y: axis('global gradient norm', 'logarithmic'), logToggle: true});
  }
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

  /*NORMLAB:PART report_encdec.js*/

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
    // a variant of an instrument chart: `pick(report)` -> points of a run probed `when`, drawn per setting
    const at = (when, pick, rest) => Object.assign({pick: (run) => run.instruments && run.instruments[when] && !isEncdecProbe(run) ? pick(run.instruments[when], run) : null,
                                                    extra: {pointRadius: 2}}, rest || {});
    const layerPoints = (rep, key) => rep.dynamics.layers.map((l) => ({x: l.layer, y: l[key]}));
    if (probed.some(([r]) => r.instruments.init.dynamics.has_loss !== false)) settingsChart(instruments, `Gradient norm by layer ${atInit}`,
              'Norm of the gradient of each layer\'s parameters (solid) and of its FFN output weights W2 alone (dotted, same colour; the quantity Xiong et al. 2020 analyse: grows toward the output for Post-LN, flat for Pre-LN), mean over 2 validation batches.',
              {variants: [at('init', (rep) => layerPoints(rep, 'grad_norm')),
                          at('init', (rep) => layerPoints(rep, 'ffn_out_grad_norm').filter((p) => p.y != null), {dash: [2, 3], suffix: ' (W2)'})],
               x: layerAxis('layer'), y: axis('||dL/dθ_l||', 'logarithmic'), logToggle: true});
    // the stream's RMS over channels, as the instruments and the per-layer logs record it (results
    // written before the instruments did recorded ||x||: stream_norm, divided by sqrt(d) here)
    const streamPoints = (rep, run) => {
      const d = rep.dynamics, old = d.final_stream_rms === undefined, k = old ? Math.sqrt(run.config.model.d_model) : 1;
      return [...layerPoints(rep, old ? 'stream_norm' : 'stream_rms'), {x: d.layers.length, y: old ? d.final_stream_norm : d.final_stream_rms}]
        .map((p) => ({x: p.x, y: p.y / k}));
    };
    for (const [when, name] of stages)
      settingsChart(instruments, `Stream RMS by depth ${name}`,
                    `Mean over tokens of ${streamUnit}, the residual stream x_l entering layer l (the last point is the stream leaving the last layer).`,
                    {variants: [at(when, streamPoints)], x: layerAxis('depth l'), y: axis(streamUnit, 'logarithmic'), logToggle: true});
    settingsChart(instruments, `Branch-to-stream ratio by layer ${atInit}`,
                  'Mean over tokens of ||F_l(x)|| / ||x_l|| for the attention (solid) and FFN (dotted, same colour) sub-layers.',
                  {variants: [at('init', (rep) => layerPoints(rep, 'attn_branch_ratio')),
                              at('init', (rep) => layerPoints(rep, 'mlp_branch_ratio'), {dash: [2, 3], suffix: ' (FFN)'})],
                   x: layerAxis('layer'), y: axis('||F|| / ||x||', 'logarithmic'), logToggle: true});
    const collapsePoints = (skips, mlp) => (rep) => {
      const v = (rep.dynamics.rank_collapse || []).find((c) => c.skips === skips && c.mlp === mlp);
      return v ? v.residual_rank.map((y, l) => ({x: l, y: Math.max(y, 1e-18)})) : [];
    };
    if (probed.some(([r]) => r.instruments.init.dynamics.rank_collapse))
      settingsChart(instruments, `Rank collapse res(X_l) by layer ${atInit}`,
                    'res(X) = ||X - 1 mean(X)^T|| / ||X|| of the stream entering layer l, for each model (solid) and for the same weights as pure attention, without skips and MLPs (dotted, same colour): Dong et al. 2021 predict collapse to rank one without skips.',
                    {variants: [at('init', collapsePoints(true, true)),
                                at('init', collapsePoints(false, false), {dash: [2, 3], suffix: ' (pure attention)'})],
                     x: layerAxis('depth l'), y: axis('res(X_l)', 'logarithmic'), logToggle: true});
    const spectrumPoints = (sv) => sv.map((v, k) => ({x: k + 1, y: Math.max(v, 1e-18)}));
    settingsChart(instruments, `Singular values of the end-to-end token-local Jacobian ${atInit}`,
                  `dy_T/dx_T through all layers at the last token of a ${T}-token validation sequence, in double precision.`,
                  {variants: [at('init', (rep) => spectrumPoints(rep.jacobian.end_to_end.token_local.singular_values))],
                   x: layerAxis('index'), y: axis('singular value', 'logarithmic'), logToggle: true});
    settingsChart(instruments, `Singular values of the first LayerNorm site ${atInit}`,
                  'Closed-form norm Jacobian at h.0 (checked against autodiff): d-2 equal values 1/s and the eps direction for LayerNorm at eps > 0; the last is the exact zero of the all-ones direction.',
                  {variants: [at('init', (rep) => rep.jacobian.norm_sites.length ? spectrumPoints(rep.jacobian.norm_sites[0].spectrum.singular_values) : [])],
                   x: layerAxis('index'), y: axis('singular value', 'logarithmic'), logToggle: true});
    for (const [when, name] of stages)
      settingsChart(instruments, `Block Jacobian σ_max and σ_min by layer ${name}`,
                    'Token-local Jacobian of each block (dy_i/dx_i): σ_max solid, σ_min dotted.',
                    {variants: [at(when, (rep) => rep.jacobian.blocks.map((b) => ({x: b.layer, y: b.token_local.singular_values[0]}))),
                                at(when, (rep) => rep.jacobian.blocks.map((b) => ({x: b.layer, y: Math.max(b.token_local.sigma_min, 1e-18)})),
                                   {dash: [2, 3], suffix: ' σ_min'})],
                     x: layerAxis('layer'), y: axis('singular value', 'logarithmic'), logToggle: true});
    function attentionByLayer(rep) {
      const max = {};
      for (const h of rep.attention.per_head) max[h.layer] = Math.max(max[h.layer] || 0, h.norm2);
      return Object.keys(max).map((l) => ({x: Number(l), y: max[l]}));
    }
    const maxLayer = Math.max(0, ...probed.map(([r]) => r.instruments.init.dynamics.layers.length - 1));
    for (const [when, name] of stages)
      settingsChart(instruments, `Attention spectral norm ||A||_2 by layer ${name} (max over heads)`,
                    `Attention on a ${T}-token sequence: 1 <= ||A||_2 <= √(c_max) <= √n (source 002, docs/SOURCES.md).`,
                    {variants: [at(when, attentionByLayer)],
                     extra: () => [{label: '√n (upper bound)', data: [{x: 0, y: Math.sqrt(T)}, {x: maxLayer, y: Math.sqrt(T)}],
                                    borderColor: '#888', borderDash: [3, 3], borderWidth: 1, pointRadius: 0}],
                     x: layerAxis('layer'), y: axis('||A||_2'), logToggle: true});
  }

  /*NORMLAB:PART report_layers.js*/

  layerLogSection();
  if (probedEncdec.length) encdecInstruments(root, probedEncdec);

  // ---- theory ----
  if (data.theory) {
    root.append(el('h2', {}, 'Theory claims'));
    root.append(el('p', {class: 'meta'}, study.kind === 'pretrained'
      ? 'Decided from each model\'s own instrument readings above (the numbers behind each verdict are in results.json).'
      : 'Measured by normlab theory, each claim in the setting its source states, on fresh models over several seeds and on the same models trained on the built-in corpus; statements about initialization only are measured on fresh models. Each claim is decided by the rule of its kind: an identity (a check of the algebra, not evidence) is exact or fails; a bound is satisfied, has a counterexample or is vacuous; a law holds when the stated law fits the seeds and carries 95% of the Akaike weight among the laws that fit (else violated, no law fits, or not distinguishable); an effect or comparison holds in direction when the 95% interval over the seeds excludes 0 on the claimed side, and its size is judged only against a size the source states. The rules and the claims: docs/THEORY.md; every seed\'s numbers: results.json.'));
    const t = el('table');
    t.append(el('tr', {}, ...['source', 'models', 'kind', 'claim', 'setting', 'rule and measured', 'verdict'].map((h) => el('th', {class: 'text'}, h))));
    for (const c of data.theory) {
      const v = c.verdict;
      const look = /^(violated|fails|counterexample)/.test(v) ? 'violated' : /^(holds|exact|satisfied)/.test(v) ? 'holds' : 'other';
      const verdict = v + (c.size && c.size !== 'size not claimed' && c.verdict !== 'skipped' ? '; ' + c.size : '');
      t.append(el('tr', {}, el('td', {class: 'text'}, c.source), el('td', {class: 'text'}, c.model || 'fresh'),
                  el('td', {class: 'text'}, c.kind || ''),
                  el('td', {class: 'text'}, (c.statement || '') + (c.reported ? ' (the paper: ' + c.reported + ')' : '')),
                  el('td', {class: 'text'}, c.setting || ''),
                  el('td', {class: 'text'}, (c.rule ? c.rule + '. ' : '') + c.measured), el('td', {class: 'text verdict-' + look}, verdict)));
    }
    root.append(t);
  }
  root.append(el('p', {class: 'meta'}, 'Charts drawn with Chart.js ' + Chart.version + ' (MIT license), inlined in this file.'));

  document.getElementById('normlab-selftest').textContent = JSON.stringify(check);
})();
