#!/usr/bin/env bash
# report_browser.sh: opens the report of a tiny study in a real headless browser (Debian's
# chromium) from file:// and fails on any console message or error, or any chart not drawn (the page
# records each chart and whether its canvas got painted, in #normlab-selftest). A deliberately broken
# copy of the report must be rejected, so the check itself is tested. A 12-run study (placements x
# learning rates x seeds) must show the three-sentence answer, the learning-rate curve, seed bands and
# small multiples, and a study over two widths its learning-rate chart with a panel per width; a study
# with per-layer logs its heatmaps and curves; a tiny translation study the
# encoder-decoder layout (a panel per stack and kind of attention, each drawn, layer axes with integer
# ticks only: the page reports any other as an error). Screenshots are kept in the artifacts directory.
# PART (default all) runs one part: tiny (the tiny study, the broken copies and the main screenshot),
# translation, twelve, layers or pretrained; ctest runs the five as separate tests, so two run at once.
# Usage: report_browser.sh path/to/normlab path/to/tests/data artifacts-dir [PART]
set -uo pipefail
NL=$(realpath "$1")
DATA=$(realpath "$2")
ART=$(mkdir -p "$3" && realpath "$3")
PART=${4:-all}
part() { [[ $PART == all || $PART == "$1" ]]; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$W"
CHROMIUM=$(command -v chromium || command -v chromium-browser) || { echo "FAIL: chromium is not installed (scripts/setup.sh --tests installs it)"; exit 1; }
flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --disable-background-networking
       --disable-extensions --disable-sync --no-first-run --user-data-dir="$W/profile"
       --virtual-time-budget=10000 --enable-logging=stderr --v=0)


# check_report FILE [MIN_CHARTS [MIN_HEATMAPS MIN_LAYER_CURVES [MIN_DEPTH_WEIGHTS]]]: 0 when every chart was
# drawn and the console stayed silent (and, given, at least that many per-layer heatmaps, per-layer curve
# charts and Attention Residuals' depth-weight panels)
check_report() {
  timeout 120 "$CHROMIUM" "${flags[@]}" --dump-dom "file://$1" > dom.html 2> console.txt
  python3 - dom.html console.txt "${2:-12}" "${3:-0}" "${4:-0}" "${5:-0}" <<'PY'
import html, json, re, sys
dom, console = open(sys.argv[1]).read(), open(sys.argv[2]).read()
m = re.search(r'<pre id="normlab-selftest"[^>]*>(.*?)</pre>', dom, re.S)
problems = []
messages = [l for l in console.splitlines() if ':CONSOLE' in l]
problems += ['console: ' + l for l in messages]
if not m or not m.group(1).strip():
    problems.append('the report script did not finish (no self-test record)')
else:
    check = json.loads(html.unescape(m.group(1)))
    problems += ['page error: ' + e for e in check['errors']]
    if check['missing']:
        problems.append('charts not drawn: %s' % check['missing'])
    want = int(sys.argv[3])
    if check['charts'] < want or check['drawn'] != check['charts']:
        problems.append('%d charts created, %d drawn (want >= %d, all drawn)' % (check['charts'], check['drawn'], want))
    # text drawn by hand on a canvas (heatmap ticks, colour bars) must fit inside it (report.js fitText)
    if check.get('clippedText'):
        problems.append('text that does not fit its canvas: %s' % check['clippedText'])
    # one unit for the stream: RMS over channels, as the per-layer logs (never ||x|| on one chart and RMS on another)
    problems += ['the stream in another unit than RMS: ' + t for t in check['titles'] if 'activation norm by depth' in t.lower()]
    heatmaps, curves = check.get('layerHeatmaps', 0), check.get('layerCurves', 0)
    if heatmaps and check.get('colourBars', 0) == 0:
        problems.append('heatmaps without a colour bar')
    if heatmaps < int(sys.argv[4]) or curves < int(sys.argv[5]):
        problems.append('%d per-layer heatmaps and %d per-layer curve charts (want >= %s and >= %s)' % (heatmaps, curves, sys.argv[4], sys.argv[5]))
    if check.get('depthWeights', 0) < int(sys.argv[6]):
        problems.append('%d depth-weight panels (want >= %s)' % (check.get('depthWeights', 0), sys.argv[6]))
    print('charts created %d, drawn %d, errors %d, console messages %d, per-layer heatmaps %d, curves %d' % (check['charts'], check['drawn'], len(check['errors']), len(messages), heatmaps, curves))
for p in problems:
    print('  ' + p)
sys.exit(1 if problems else 0)
PY
}

fail=0
if part tiny; then
"$NL" compare --config "$DATA/tiny_study.toml" --out tiny > compare.txt 2>&1 || { echo "FAIL: compare: $(tail compare.txt)"; exit 1; }
if check_report "$W/tiny/report.html"; then echo "ok: report of the tiny study"; else echo "FAIL: report of the tiny study"; fail=1; fi
# the checks must catch a broken page: a chart that throws, and a page script that dies
sed 's/new Chart(canvas, config)/new Chart(canvas, Object.assign(config, {type: "nosuchtype"}))/' tiny/report.html > broken_chart.html
if check_report "$W/broken_chart.html" > /dev/null; then echo "FAIL: a report whose charts throw passed"; fail=1; else echo "ok: a broken chart is caught"; fi
sed 's/const runs = data.runs;/const runs = data.nosuch.runs;/' tiny/report.html > broken_script.html
if check_report "$W/broken_script.html" > /dev/null; then echo "FAIL: a report whose script dies passed"; fail=1; else echo "ok: a dead script is caught"; fi
timeout 120 "$CHROMIUM" "${flags[@]}" --hide-scrollbars --window-size=1280,4200 --screenshot="$ART/report.png" \
  "file://$W/tiny/report.html" 2> /dev/null
cp tiny/report.html "$ART/report.html"
if [[ -s "$ART/report.png" ]]; then echo "screenshot: $ART/report.png"; else echo "FAIL: no screenshot"; fail=1; fi
fi

# a tiny translation study: the encoder-decoder instruments, per stack
if part translation; then
mkdir corpus
perl -e '
  my @w = qw(sun moon star sea fire);
  srand(11);
  for my $split (["train", 200], ["valid", 16], ["test", 4]) {
    open(my $s, ">", "corpus/$split->[0].src") or die; open(my $t, ">", "corpus/$split->[0].tgt") or die;
    for (1 .. $split->[1]) {
      my @x = map { $w[int(rand(@w))] } 1 .. 2 + int(rand(3));
      print $s join(" ", @x), "\n"; print $t join(" ", @x), "\n";
    }
  }'
if "$NL" compare --config "$DATA/tiny_translation_study.toml" --out tinyt > comparet.txt 2>&1; then
  # training: loss, validation loss, gradient norm, BLEU; per stack: 2 gradient, 4 activation, 2 branch-ratio,
  # 6 attention (encoder self, decoder self, cross; fresh and trained) and 4 Jacobian spectra
  if check_report "$W/tinyt/report.html" 22 && python3 - dom.html <<'PY'
import re, sys
charts = re.findall(r'data-chart="([^"]*)"', open(sys.argv[1]).read())
want = ["Encoder: gradient norm by encoder layer at initialization", "Decoder: gradient norm by decoder layer at initialization",
        "Encoder: stream RMS by depth after training", "Decoder: branch-to-stream ratio by decoder layer at initialization",
        "Cross-attention (decoder queries over the source): ||A||_2 by layer after training (max over heads)",
        "Singular values of the source Jacobian at initialization"]
missing = [w for w in want if w not in charts]
single = [c for c in charts if "LayerNorm site" in c or c.startswith("Gradient norm by layer")]  # the one-stack layout
assert not missing and not single, (missing, single)
PY
  then echo "ok: report of the tiny translation study"; else echo "FAIL: report of the tiny translation study"; fail=1; fi
  timeout 120 "$CHROMIUM" "${flags[@]}" --hide-scrollbars --window-size=1280,5200 --screenshot="$ART/report_translation.png" \
    "file://$W/tinyt/report.html" 2> /dev/null
else
  echo "FAIL: compare tiny translation study: $(tail -3 comparet.txt)"; fail=1
fi

if [[ -s tinyt/report.html ]]; then  # a layer axis that ticks between layers (Chart.js's default ticks)
  sed 's/ticks: {stepSize: 1, precision: 0, /ticks: {/' tinyt/report.html > broken_ticks.html
  if check_report "$W/broken_ticks.html" 22 > /dev/null; then echo "FAIL: a layer axis with ticks between layers passed"; fail=1; else echo "ok: ticks between layers are caught"; fi
fi
fi

# a 12-run study (3 placements x 2 learning rates x 2 seeds): the layout a grid over seeds and
# learning rates needs must be there: the answer in three sentences, the learning-rate curve, seed
# bands, small multiples; screenshots of its sections are kept for a human look
if part twelve; then
"$NL" compare --config "$DATA/twelve_study.toml" --out twelve > twelve.txt 2>&1 || { echo "FAIL: compare twelve: $(tail -3 twelve.txt)"; fail=1; }
if check_report "$W/twelve/report.html"; then echo "ok: report of the 12-run study"; else echo "FAIL: report of the 12-run study"; fail=1; fi
python3 - dom.html <<'PY' || fail=1
import html, json, re, sys
dom = open(sys.argv[1]).read()
check = json.loads(html.unescape(re.search(r'<pre id="normlab-selftest"[^>]*>(.*?)</pre>', dom, re.S).group(1)))
headline = re.search(r'<p class="headline" id="headline">(.*?)</p>', dom, re.S)
problems = []
if not headline or 'At its own best learning rate' not in headline.group(1):
    problems.append('no three-sentence answer naming each placement at its best learning rate')
if 'id="input">Input of every run: the built-in corpus (data/kjv.txt)' not in dom:
    problems.append('the report does not say what the runs trained on')
repro = re.search(r'<table id="reproductions">(.*?)</table>', dom, re.S)
if not repro or 'IWSLT14 De-En 6L-6L BLEU Post-LN 35.64' not in repro.group(1) or 'paired by seed, 2 seeds' not in repro.group(1):
    problems.append('no reproductions table with the source\'s numbers beside normlab\'s (paired over the 2 seeds)')
if 'Final validation loss against learning rate' not in check['titles']:
    problems.append('no learning-rate chart')
if 'a − b against training steps: placement=post vs placement=pre' not in check['titles']:
    problems.append('no chart of the reproduction\'s gap against training steps')
# 6 settings (3 placements x 2 lrs) on a chart: one panel per placement, 3 per chart
if check['panels'] < 3 or check['panels'] % 3:
    problems.append('small multiples: %d panels (want 3 per chart)' % check['panels'])
if check['bands'] < 6:
    problems.append('seed bands: %d drawn (want one per setting at least)' % check['bands'])
# which signal moved first: a table of the runs above their best rate that fell behind it, when any did
with open('twelve/results.json') as f:
    behind = [r for e in json.load(f).get('onsets', []) for r in e['runs'] if r['loss_behind_step'] is not None]
onsets = re.search(r'<table id="onsets">(.*?)</table>', dom, re.S)
if bool(behind) != bool(onsets):
    problems.append('%d runs fell behind their best rate, but the report %s a "Which signal moved first" table'
                    % (len(behind), 'has' if onsets else 'has no'))
elif behind and onsets.group(1).count('<tr>') != len(behind) + 1:
    problems.append('the onsets table has %d rows for %d runs' % (onsets.group(1).count('<tr>') - 1, len(behind)))
for p in problems: print('  ' + p)
print(('FAIL' if problems else 'ok') + ': the 12-run layout (answer, reproductions, lr curve, %d panels, %d seed bands, %d runs behind their best rate)' % (check['panels'], check['bands'], len(behind)))
sys.exit(1 if problems else 0)
PY
# the table of which signal moved first, from hand-made entries put into the page's data (the tiny
# studies train too briefly for any run to learn beyond byte frequencies, so none has a best rate to
# fall behind): a cell for each order, a signal not logged and one that stayed in range
python3 - twelve/report.html onsets.html <<'PY'
import json, re, sys
page = open(sys.argv[1]).read()
m = re.search(r'<script type="application/json" id="normlab-data">(.*?)</script>', page, re.S)
data = json.loads(m.group(1))
def sig(onset, order, lead):
    return {'reference_max': 8.0, 'onset_step': onset, 'in_range_until': 1, 'lead': lead, 'order': order}
data['onsets'] = [{'setting': 'placement=post', 'layer_log_every': 100, 'train_log_every': 1, 'runs': [
    {'seed': '1/1', 'lr': 0.03, 'best_lr': 0.003, 'outcome': 'fell behind', 'loss_behind_step': 70, 'loss_level_until': 69,
     'signals': {'max_attn_logit': sig(50, 'before', 20), 'abs_log_z': None, 'grad_norm': sig(None, 'never', None)}},
    {'seed': '2/2', 'lr': 0.03, 'best_lr': 0.003, 'outcome': 'learned nothing', 'loss_behind_step': 35, 'loss_level_until': 34,
     'signals': {'max_attn_logit': sig(100, 'unresolved', -65), 'abs_log_z': None, 'grad_norm': sig(90, 'after', -55)}}]}]
text = json.dumps(data).replace('<', '\\u003c')
open(sys.argv[2], 'w').write(page[:m.start(1)] + text + page[m.end(1):])
PY
if check_report "$W/onsets.html" && python3 - dom.html <<'PY'
import re, sys
table = re.search(r'<table id="onsets">(.*?)</table>', open(sys.argv[1]).read(), re.S)
cells = re.findall(r'<td[^>]*>(.*?)</td>', table.group(1)) if table else []
want = ['50 (+20: first)', 'not logged', 'stayed in range (never)', '100 (-65: too close to order)', '90 (-55: after the loss)']
missing = [w for w in want if w not in cells]
rows = table.group(1).count('<tr>') if table else 0
if missing or rows != 3:
    print('  onsets table: %d rows (want 3), missing cells %s' % (rows, missing))
    sys.exit(1)
PY
then echo "ok: the table of which signal moved first"; else echo "FAIL: the table of which signal moved first"; fail=1; fi
for part in 0 1900 3300; do
  sed "s#</body>#<script>window.addEventListener('load', () => { document.querySelector('main').style.marginTop = '-${part}px'; });</script></body>#" \
    twelve/report.html > shot.html
  timeout 120 "$CHROMIUM" "${flags[@]}" --hide-scrollbars --window-size=1280,1400 --screenshot="$ART/report_twelve_$part.png" \
    "file://$W/shot.html" 2> /dev/null
done
cp twelve/report.html "$ART/report_twelve.html"
# a study over two widths: the learning-rate chart as Wortsman et al.'s figure, one panel per size
"$NL" compare --config "$DATA/sizes_study.toml" --out sizes > sizes.txt 2>&1 || { echo "FAIL: compare sizes: $(tail -3 sizes.txt)"; fail=1; }
if check_report "$W/sizes/report.html" 4 && grep -q '<h3>Final validation loss against learning rate (one panel per d_model)' dom.html &&
   grep -q 'spike score (loss / grad norm)</th>' dom.html; then
  echo "ok: the learning-rate chart of a study over two widths has a panel per width"
else
  echo "FAIL: the learning-rate chart of a study over two widths (no panel per d_model, or a chart not drawn)"; fail=1
fi
fi

# per-layer logs during training: 3 placements and Pre-LN with mHC and with Attention Residuals x 2 seeds;
# panels for the first seed of each setting. Every quantity with data gets a heatmap card with a panel per
# setting that has the site (38 panels at least, the composite gain's only for the hyper-connected runs) and
# a curve chart (12), the model update its chart, and Attention Residuals its depth weights (one panel).
if part layers; then
"$NL" compare --config "$DATA/layers_study.toml" --out layers > layers.txt 2>&1 || { echo "FAIL: compare layers: $(tail layers.txt)"; fail=1; }
if check_report "$W/layers/report.html" 12 38 12 1; then echo "ok: report of the per-layer study"; else echo "FAIL: report of the per-layer study"; fail=1; fi
# a heatmap that paints no cells must be caught
sed 's/if (v == null || (logScale/if (true || v == null || (logScale/' layers/report.html > broken_heatmap.html
if check_report "$W/broken_heatmap.html" 12 38 12 > /dev/null; then echo "FAIL: a report whose heatmaps are empty passed"; fail=1; else echo "ok: an empty heatmap is caught"; fi
# depth weights that paint no cells must be caught
sed 's/if (v == null || !(v > 0)) return;/return;/' layers/report.html > broken_depth.html
if check_report "$W/broken_depth.html" 12 38 12 1 > /dev/null; then echo "FAIL: a report whose depth weights are empty passed"; fail=1; else echo "ok: empty depth weights are caught"; fi
# a label wider than its canvas must be caught
sed 's/fitText(ctx, `colour: ${title}/fitText(ctx, `colour: ${title.repeat(20)}/' layers/report.html > broken_bar.html
if check_report "$W/broken_bar.html" 12 38 12 > /dev/null; then echo "FAIL: a colour-bar label wider than its canvas passed"; fail=1; else echo "ok: a label that does not fit is caught"; fi
timeout 120 "$CHROMIUM" "${flags[@]}" --hide-scrollbars --window-size=1280,5200 --screenshot="$ART/report_layers.png" \
  "file://$W/layers/report.html" 2> /dev/null
cp layers/report.html "$ART/report_layers.html"
fi

# the pretrained study: the real all-MiniLM-L6-v2 (fetched once into the cache) beside a fresh model
if ! part pretrained; then
  :
elif "$NL" compare --study pretrained --out pretrained > pretrained.txt 2>&1; then
  if check_report "$W/pretrained/report.html" 7; then echo "ok: report of the pretrained study"; else echo "FAIL: report of the pretrained study"; fail=1; fi
  timeout 120 "$CHROMIUM" "${flags[@]}" --hide-scrollbars --window-size=1280,3600 --screenshot="$ART/report_pretrained.png" \
    "file://$W/pretrained/report.html" 2> /dev/null
  cp pretrained/report.html "$ART/report_pretrained.html"
else
  echo "FAIL: compare --study pretrained: $(tail -3 pretrained.txt)"; fail=1
fi

exit $fail
