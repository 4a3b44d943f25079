// report_layers.js: part of report.js (inserted by normlab at its NORMLAB:PART marker, inside the
// same function, so it uses report.js's helpers and data): the per-layer logs of training
// (train.log_every_layers) as step x layer heatmaps and per-layer curves at chosen steps, and
// DeepNet's model update.

  // ---- per-layer logs during training (results.json: run.layer_log, from train.log_every_layers) ----
  // Heatmaps (logged step x sub-layer, one panel per run) and per-layer curves at the first logged
  // step, the end of warm-up and the last, for each quantity; DeepNet's model update by step.
  const layerQuantities = [
    ['grad_norm_total', 'Gradient norm by sub-layer', '||dL/dθ|| of all the sub-layer\'s parameters (before clipping)', true],
    ['update_ratio_total', 'Update ratio by sub-layer', '||Δθ|| / ||θ|| of the sub-layer\'s parameters over the logged step (the optimizer\'s change, weight decay included)', true],
    ['stream_rms', 'Stream RMS entering each sub-layer', `${streamUnit} per token of the stream x entering the sub-layer, mean over tokens`, true],
    ['branch_ratio', 'Branch-to-stream ratio', 'mean over tokens of ||F(h)|| / ||x_in||, F the branch before any branch norm and scale', true],
    ['ln_in_input_rms', 'Input RMS of ln_in', 'RMS over channels per token of what the sub-layer\'s input norm reads (the stream)', true],
    ['ln_branch_input_rms', 'Input RMS of ln_branch', 'RMS over channels per token of the branch output the branch norm reads', true],
    ['ln_out_input_rms', 'Input RMS of ln_out', 'RMS over channels per token of the residual sum r the output norm reads (Post-LN\'s LN input)', true],
    ['attn_entropy', 'Attention entropy', 'mean over heads, queries and batch of the entropy of the attention row (nats); cross-attention rows read the source', false],
    ['attn_max_logit', 'Largest attention logit', 'the largest scaled q·k a self-attention\'s softmax saw (over batch, heads and the unmasked pairs), before any soft cap: its growth precedes attention-logit divergence', false],
    ['attn_sink_share', 'Attention sinks on the first token', 'share of (batch row, head) whose first token receives a mean attention above 0.3 from the queries (Gu et al.\'s sink)', false],
    ['stream_max_ratio', 'Largest stream entry over the median', 'largest |x| of the stream entering the sub-layer over the median |x| of all its entries (massive activations: Sun et al. report 100-10,000)', true],
    ['composite_gain', 'Composite gain of the residual mixes', 'hyper-connections (model.hyper) only: the largest absolute row sum of the product of the residual mixes from the stack\'s first sub-layer up to this one, maximum over the tokens (mHC\'s Amax Gain Magnitude: 1 keeps the streams\' scale, unconstrained HC\'s can grow)', true],
  ];
  // a quantity's (logged step, row) table; [] in a run that does not log it (composite_gain without hyper-connections)
  const layerValues = (log, q) => log.values[q] || [];
  function layerLogSection() {
    const logged = runs.map((r, i) => [r, i]).filter(([r]) => r.layer_log && r.layer_log.step.length);
    if (!logged.length) return;
    root.append(el('h2', {}, 'Per layer during training'));
    // small multiples: with a seed key varying, the first seed of each setting only
    const seedKeys = varying.filter((k) => k === 'train.seed' || k === 'model.seed');
    const seen = new Set();
    const shown = logged.filter(([r]) => {
      if (!seedKeys.length) return true;
      const key = varying.filter((k) => !seedKeys.includes(k)).map((k) => JSON.stringify(gridValue(r, k))).join('|');
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    });
    const first = logged[0][0].layer_log;
    root.append(el('p', {class: 'meta'},
      `Logged by train.log_every_layers at step 1, every N steps and at the last step, from the step's last micro-batch ` +
      `(no extra forward pass). A row per sub-layer (attention, cross-attention, MLP) grouped by layer, layer 0 at the bottom; ` +
      `colour on a log scale except for the entropy, one scale per quantity across the panels.` +
      (shown.length < logged.length ? ` One panel per setting: the first seed of each (every run's numbers are in results.json).` : '') +
      (logged.some(([r]) => r.layer_log.logged > r.layer_log.step.length) ? ' Runs with many logged steps are thinned to 60 evenly spaced ones.' : '')));
    // the position of a row on the layer axis: layer + its place among the layer's sub-layers
    const rowY = (rows) => rows.map((row, k) => {
      const same = rows.filter((o) => o.layer === row.layer);
      return row.layer + same.indexOf(row) / same.length;
    });
    const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];  // viridis
    function colourAt(t) {
      t = Math.min(1, Math.max(0, t)) * (stops.length - 1);
      const k = Math.min(stops.length - 2, Math.floor(t)), f = t - k;
      const c = stops[k].map((v, j) => Math.round(v + f * (stops[k + 1][j] - v)));
      return `rgb(${c[0]},${c[1]},${c[2]})`;
    }
    // a heatmap canvas's frame (W x H, the cells inside left/bottom/top/right margins), its tick labels
    // ([text, position] on each axis) and the y axis's title, rotated
    const W = 300, H = 200, left = 34, bottom = 24, top = 16, right = 6;
    function axes(ctx, yTicks, xTicks, yTitle) {
      ctx.fillStyle = '#1d232b';
      ctx.strokeStyle = '#1d232b';
      ctx.font = '10px system-ui, sans-serif';
      ctx.textAlign = 'right';
      ctx.textBaseline = 'middle';
      for (const [text, y] of yTicks) fitText(ctx, text, left - 4, y);
      ctx.textAlign = 'center';
      ctx.textBaseline = 'top';
      for (const [text, x] of xTicks) fitText(ctx, text, x, H - bottom + 4);
      ctx.save();
      ctx.translate(9, (H - bottom + top) / 2);
      ctx.rotate(-Math.PI / 2);
      ctx.fillText(yTitle, 0, -4);
      ctx.restore();
      ctx.strokeRect(left, top, W - left - right, H - bottom - top);
    }
    function heatmap(parent, run, log, q, range, logScale) {
      const canvas = el('canvas', {width: W, height: H, 'data-heatmap': q + ' ' + run.label});
      const box = el('div', {class: 'heatmap'}, el('div', {class: 'heatmap-title'}, run.label), canvas);
      parent.append(box);
      check.charts++;
      const ctx = canvas.getContext('2d');
      const steps = log.step, ys = rowY(log.rows), layers = Math.max(...log.rows.map((r) => r.layer)) + 1;
      const maxStep = steps[steps.length - 1], minStep = steps[0];
      const sx = (s) => left + (W - left - right) * (maxStep > minStep ? (s - minStep) / (maxStep - minStep) : 0.5);
      const sy = (y) => H - bottom - (H - bottom - top) * y / layers;
      const value = (v) => logScale ? Math.log10(v) : v;
      let cells = 0;
      layerValues(log, q).forEach((row, k) => {
        const x0 = k === 0 ? sx(steps[0]) : (sx(steps[k - 1]) + sx(steps[k])) / 2;
        const x1 = k === steps.length - 1 ? sx(steps[k]) + 1 : (sx(steps[k]) + sx(steps[k + 1])) / 2;
        row.forEach((v, r) => {
          if (v == null || (logScale && !(v > 0))) return;
          const same = log.rows.filter((o) => o.layer === log.rows[r].layer).length;
          ctx.fillStyle = colourAt((value(v) - range[0]) / Math.max(1e-12, range[1] - range[0]));
          ctx.fillRect(x0, sy(ys[r] + 1 / same), Math.max(1, x1 - x0), sy(ys[r]) - sy(ys[r] + 1 / same));
          cells++;
        });
      });
      const every = Math.max(1, Math.ceil(layers / 12));
      const yTicks = [];
      for (let l = 0; l < layers; l += every) yTicks.push([String(l), sy(l + 0.5)]);
      axes(ctx, yTicks, [minStep, Math.round((minStep + maxStep) / 2), maxStep].map((s) => [String(s), sx(s)]), 'layer');
      // drawn: cells painted (axes alone do not count)
      if (cells > 0 && canvasDrawn(canvas)) check.drawn++; else check.missing.push('heatmap ' + q + ' ' + run.label);
      check.layerHeatmaps = (check.layerHeatmaps || 0) + 1;
    }
    // The colour scale of a quantity's panels: the bar, its two end values under its ends, and what
    // the colour measures (title and scale) beside it.
    function colourBar(range, logScale, title) {
      const canvas = el('canvas', {width: 620, height: 30, 'data-colour-bar': title});
      const ctx = canvas.getContext('2d');
      for (let x = 0; x < 240; x++) {
        ctx.fillStyle = colourAt(x / 239);
        ctx.fillRect(30 + x, 2, 1, 10);
      }
      ctx.fillStyle = '#1d232b';
      ctx.font = '10px system-ui, sans-serif';
      ctx.textAlign = 'center';
      ctx.textBaseline = 'top';
      const label = (v) => logScale ? (+Math.pow(10, v).toPrecision(2)).toExponential(1).replace('e+0', 'e').replace('e-0', 'e-') : v.toFixed(2);
      fitText(ctx, label(range[0]), 30, 15);
      fitText(ctx, label(range[1]), 270, 15);
      ctx.textAlign = 'left';
      ctx.textBaseline = 'middle';
      fitText(ctx, `colour: ${title}${logScale ? ' (log scale)' : ''}`, 282, 8);
      check.colourBars = (check.colourBars || 0) + 1;
      return canvas;
    }
    const heatmaps = el('div', {});
    root.append(heatmaps);
    for (const [q, title, what, logScale] of layerQuantities) {
      const vals = shown.flatMap(([r]) => layerValues(r.layer_log, q).flat()).filter((v) => v != null && (!logScale || v > 0));
      if (!vals.length) continue;
      const tr = vals.map((v) => logScale ? Math.log10(v) : v);
      const range = [Math.min(...tr), Math.max(...tr)];
      const card = el('div', {class: 'card layer-card'}, el('h3', {}, title + ' (heatmap: logged step × layer)'));
      const panels = el('div', {class: 'heatmaps'});
      card.append(panels);
      const hasSite = ([r]) => layerValues(r.layer_log, q).some((row) => row.some((v) => v != null));
      for (const [run] of shown.filter(hasSite)) heatmap(panels, run, run.layer_log, q, range, logScale);
      card.append(colourBar(range, logScale, title.replace(/ entering each sub-layer| by sub-layer/, '')));
      const without = shown.filter((x) => !hasSite(x)).map(([r]) => r.label);
      card.append(el('p', {class: 'note'}, what + '. Empty cells: the site is absent in that sub-layer (or the value is zero).' +
                     (without.length ? ' No such site in: ' + without.join(', ') + '.' : '')));
      heatmaps.append(card);
    }
    // Attention Residuals: the depth weights each sub-layer read its sources with at the last logged step
    // (sub-layer x source, colour 0 to 1 on a linear scale; blank where the sub-layer does not read)
    function depthWeights(parent, run, dw) {
      const rows = dw.values.length, sources = Math.max(...dw.values.map((w) => (w || []).length));
      const canvas = el('canvas', {width: W, height: H, 'data-depth-weights': run.label});
      parent.append(el('div', {class: 'heatmap'}, el('div', {class: 'heatmap-title'}, `${run.label}, step ${dw.step}`), canvas));
      check.charts++;
      const ctx = canvas.getContext('2d');
      const cw = (W - left - right) / sources, ch = (H - bottom - top) / rows;
      let cells = 0;
      dw.values.forEach((w, r) => (w || []).forEach((v, s) => {
        if (v == null || !(v > 0)) return;
        ctx.fillStyle = colourAt(v);
        ctx.fillRect(left + s * cw, H - bottom - (r + 1) * ch, cw, ch);
        cells++;
      }));
      const yTicks = [], xTicks = [];
      for (let r = 0; r < rows; r += Math.max(1, Math.ceil(rows / 12))) yTicks.push([String(r), H - bottom - (r + 0.5) * ch]);
      for (let s = 0; s < sources; s += Math.max(1, Math.ceil(sources / 10))) xTicks.push([s === 0 ? 'emb' : String(s), left + (s + 0.5) * cw]);
      axes(ctx, yTicks, xTicks, 'sub-layer');
      if (cells > 0 && canvasDrawn(canvas)) check.drawn++; else check.missing.push('depth weights ' + run.label);
      check.depthWeights = (check.depthWeights || 0) + 1;
    }
    const withDepth = shown.filter(([r]) => r.layer_log.depth_weights);
    if (withDepth.length) {
      const card = el('div', {class: 'card layer-card'}, el('h3', {}, 'Depth weights of Attention Residuals (sub-layer × source, last log)'));
      const panels = el('div', {class: 'heatmaps'});
      card.append(panels);
      for (const [run] of withDepth) depthWeights(panels, run, run.layer_log.depth_weights);
      card.append(colourBar([0, 1], false, 'depth weight'));
      card.append(el('p', {class: 'note'}, 'model.hyper = "attn_res" only: the softmax weight each sub-layer (rows, 0 at the bottom: ' +
                     'attention then MLP of each layer) gives each source it reads (columns: emb the embedding output, k the ' +
                     'k-th block\'s sum of outputs), mean over the tokens of the logged step\'s last micro-batch; a row sums to 1. ' +
                     'Blank: a source the sub-layer does not read (a later block). At initialization every weight of a row is equal.'));
      heatmaps.append(card);
    }
    // per-layer curves at the first logged step, the end of warm-up and the last
    root.append(legend());
    const curves = el('div', {class: 'grid'});
    root.append(curves);
    const stepDash = [[], [6, 4], [2, 3]];
    function chosenSteps(run) {
      const steps = run.layer_log.step;
      const warm = run.config.train.warmup_steps;
      const nearest = (s) => steps.reduce((best, x) => Math.abs(x - s) < Math.abs(best - s) ? x : best, steps[0]);
      return [...new Set([steps[0], nearest(warm), steps[steps.length - 1]])];
    }
    const allSteps = chosenSteps(logged[0][0]);
    for (const [q, title, what, logScale] of layerQuantities) {
      const sets = [];
      for (const [run, i] of shown) {
        const log = run.layer_log, ys = rowY(log.rows);
        chosenSteps(run).forEach((s, k) => {
          const at = log.step.indexOf(s);
          const pts = (layerValues(log, q)[at] || []).map((v, r) => ({x: ys[r], y: v})).filter((p) => p.y != null && (!logScale || p.y > 0));
          if (pts.length) sets.push(lineSet(run, i, pts, {label: `${run.label}, step ${s}`, borderDash: stepDash[k], pointRadius: 2}));
        });
      }
      if (!sets.length) continue;
      check.layerCurves = (check.layerCurves || 0) + 1;
      chartCard(curves, `${title} by layer at chosen steps`,
                `${what}. Solid: step ${allSteps[0]} (the first log: the initial parameters); dashed: the log nearest the end of warm-up; dotted: the last log. ` +
                'A layer\'s sub-layers sit at fractions of it (attention at l, then cross-attention, then MLP).',
                {type: 'line', data: {datasets: sets},
                 options: {scales: {x: {type: 'linear', title: {display: true, text: 'layer'}, ticks: {stepSize: 1, precision: 0}},
                                    y: axis(title, logScale ? 'logarithmic' : 'linear')}}}, {logToggle: true});
    }
    const withZ = logged.filter(([r]) => r.layer_log.log_z_max);
    if (withZ.length)
      chartCard(curves, 'Output log Z',
                'log Z = log Σ_v exp(logit_v) of each position\'s output logits (what z-loss penalizes), at each logged step: the largest over the batch solid, the mean dashed. Its drift away from 0 precedes output-logit divergence.',
                {type: 'line', data: {datasets: withZ.flatMap(([run, i]) => [
                  lineSet(run, i, run.layer_log.step.map((s, k) => ({x: s, y: run.layer_log.log_z_max[k]})).filter((p) => p.y != null), {pointRadius: 2}),
                  lineSet(run, i, run.layer_log.step.map((s, k) => ({x: s, y: run.layer_log.log_z_mean[k]})).filter((p) => p.y != null), {label: `${run.label} (mean)`, pointRadius: 0, borderDash: [4, 3]})])},
                 options: {scales: {x: axis('step'), y: axis('log Z (nats)')}}});
    const updated = logged.filter(([r]) => r.layer_log.model_update);
    if (updated.length)
      chartCard(curves, 'Model update ||ΔF|| on the probe batch',
                'DeepNet\'s model update (train.log_model_update): mean over the positions of a fixed validation batch of ||F(x, θ_t) − F(x, θ_{t−1})||, the L2 norm over the vocabulary of the change of the logits over one optimizer step, at each logged step.',
                {type: 'line', data: {datasets: updated.map(([run, i]) => lineSet(run, i,
                  run.layer_log.step.map((s, k) => ({x: s, y: run.layer_log.model_update[k]})).filter((p) => p.y != null && p.y > 0), {pointRadius: 2}))},
                 options: {scales: {x: axis('step'), y: axis('||ΔF||', 'logarithmic')}}}, {logToggle: true});
  }
