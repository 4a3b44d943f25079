// report_encdec.js: part of report.js (inserted by normlab at its NORMLAB:PART marker, inside the
// same function, so it uses report.js's helpers and data): the readings of encoder-decoder runs per
// stack: gradient, activation and branch-ratio charts for the encoder and the decoder (cross-attention
// apart), ||A||_2 per kind of attention, and the decoder and source Jacobians.

  // ---- encoder-decoder instruments, per stack (results.json: instruments.{init,final} with arch "encdec") ----
  function isEncdecProbe(run) {
    return Boolean(run.instruments && run.instruments.init && run.instruments.init.arch === 'encdec');
  }
  // The run table's gradient ratio: last layer / first, per stack for an encoder-decoder.
  function gradRatioText(init) {
    if (init.arch !== 'encdec') return fmt(init.dynamics.grad_norm_last_over_first, 3);
    return `enc ${fmt(init.dynamics.encoder.grad_norm_last_over_first, 2)} / dec ${fmt(init.dynamics.decoder.grad_norm_last_over_first, 2)}`;
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
      const d = lineSet(run, i, pick(run.instruments[when], run), Object.assign({pointRadius: 2}, extra || {}));
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
        layerChartCard(box, `${name}: stream RMS by depth ${stageName}`,
          `Mean over real (unpadded) tokens of ${streamUnit}, the ${stack} stream x_l entering layer l; the last point is the stream leaving its last layer (before the final norm).`,
          {type: 'line', data: {datasets: series(when, (rep, run) => {
            // stream_rms; results written before the instruments recorded RMS hold ||x||: stream_norm / sqrt(d)
            const st = rep.dynamics[stack], old = st.out_stream_rms === undefined;
            const k = old ? Math.sqrt(run.config.model.d_model) : 1;
            return [...layerPoints(stack, old ? 'stream_norm' : 'stream_rms')(rep),
                    {x: st.layers.length, y: old ? st.out_stream_norm : st.out_stream_rms}].map((p) => ({x: p.x, y: p.y / k}));
          })},
           options: {scales: {x: layerAxis(`${stack} depth l`), y: axis(streamUnit, 'logarithmic')}}});
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
