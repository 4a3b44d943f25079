# cli_lib.sh: what the CLI tests share, sourced after `set -uo pipefail` with the normlab binary as
# $1: NL (its absolute path), a scratch directory W (the working directory, removed at exit unless
# KEEP is set), passive OpenMP waiting (tests may run beside other processes), the pass/fail counters
# and three helpers:
#   check CONDITION MESSAGE      eval CONDITION; count a pass, or print MESSAGE as a failure
#   expect_error NEEDLE -- ARGS  normlab ARGS must exit 1, stderr starting "normlab: error:" and
#                                holding NEEDLE (a config's problems are listed one per line below it)
#   fingerprint RUN_DIR          md5 of what a bit-identical run must repeat: the train, val and layers
#                                records without timings, then the newest checkpoint's tensor bytes
#                                (parameters and AdamW moments; the header holds the out_dir)
#   finish NAME                  print "NAME: N passed, M failed" and return non-zero on a failure
# A command's output is searched with `cmd | grep PATTERN >/dev/null`, never `| grep -q`: under
# pipefail, grep -q's exit at the first match can kill the writer (SIGPIPE), failing the check, or
# passing it when negated.
NL=$(realpath "$1")
export OMP_WAIT_POLICY=PASSIVE
W=$(mktemp -d)
trap '[[ -n "${KEEP:-}" ]] || rm -rf "$W"' EXIT
cd "$W" || exit 1
[[ -n "${KEEP:-}" ]] && echo "work dir: $W"
pass=0
fail=0
check() {
  if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2"; fi
}
expect_error() {
  local needle=$1
  shift 2
  local err rc
  err=$(timeout 120 "$NL" "$@" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -eq 1 && "$err" == *"$needle"* && "$err" == "normlab: error:"* ]]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: normlab $* -> exit $rc, wanted 1 with '$needle'; stderr: $err"
  fi
}
fingerprint() {
  jq -c 'select(.type == "train" or .type == "val" or .type == "layers") | del(.elapsed_s, .tokens_per_s)' "$1/metrics.jsonl" | md5sum
  local h
  h=$(od -An -t u8 -N8 "$1/checkpoint.safetensors" | tr -d ' ')
  tail -c +$((9 + h)) "$1/checkpoint.safetensors" | md5sum
}
finish() {
  echo "$1: $pass passed, $fail failed"
  [[ $fail -eq 0 ]]
}
