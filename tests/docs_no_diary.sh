#!/usr/bin/env bash
# Neither the user documents (README.md and docs/*.md) nor the code's comments and messages must
# read as a diary of the project's work periods or cite its internal issue numbers, which users
# never see. Besides the documents, every text file under src/, studies/, configs/, python/,
# scripts/, tests/ and bench/ is checked, except bench/results/ (dated benchmark records), this
# script (its patterns are the check) and build output or tool state: directories named build,
# build-*, __pycache__ or *.egg-info, files and directories whose name starts with a dot
# (bench/.venv), and binary files. Fails (exit 1) when one holds
#   - an ordinal work period: "the twenty-sixth session", "in the third sitting", "fifth work
#     period" (an ordinal word, then a space or hyphen, then session / sitting / work period /
#     period; any case), or
#   - an issue reference: the regex [Ii]ssues? #?[0-9]+ ("issue 29", "Issue 25's", "issues #12"),
# and prints file:line:text of each hit; passes (exit 0) otherwise. An upstream project's issue may
# be cited as owner/repo#N. A missing README.md or docs/ is an error (exit 2); a missing code
# directory is skipped.
# Usage: tests/docs_no_diary.sh [repository root]   (default: the directory above this script)
set -uo pipefail

root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
cd "$root" 2>/dev/null || { echo "docs_no_diary: no such directory: $root" >&2; exit 2; }
[[ -f README.md && -d docs ]] || { echo "docs_no_diary: $root has no README.md or docs/" >&2; exit 2; }

ordinals='first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth'
ordinals+='|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth'
ordinals+='|twenty-[a-z]+|thirtieth|thirty-[a-z]+'
diary="\\b($ordinals)[ -](session|sitting|work period|period)"
issue='[Ii]ssues? #?[0-9]+'

shopt -s nullglob
pages=(README.md docs/*.md)

# the code's text files, in a stable order
code_dirs=()
for d in src studies configs python scripts tests bench; do
  [[ -d $d ]] && code_dirs+=("$d")
done
code=()
if (( ${#code_dirs[@]} )); then
  mapfile -d '' code < <(find "${code_dirs[@]}" \
      \( -path bench/results -o -name '.?*' -o -name __pycache__ -o -name '*.egg-info' \
         -o -name build -o -name 'build-*' \) -prune \
      -o -type f ! -path tests/docs_no_diary.sh -print0 | sort -z)
fi
files=("${pages[@]}" "${code[@]}")

# grep exits 0 on a match, 1 on none, 2 on an error; -I skips binary files (model fixtures)
hits_diary=$(grep -I -n -H -i -E -- "$diary" "${files[@]}"); rc_diary=$?
hits_issue=$(grep -I -n -H -E -- "$issue" "${files[@]}"); rc_issue=$?
if (( rc_diary > 1 || rc_issue > 1 )); then
  echo "docs_no_diary: grep failed" >&2
  exit 2
fi

# one line per hit, in file and line order (a line with both kinds is listed once)
hits=$(printf '%s\n%s\n' "$hits_diary" "$hits_issue" | sed '/^$/d' | sort -t: -k1,1 -k2,2n -u)
if [[ -n $hits ]]; then
  echo "docs_no_diary: $(wc -l <<<"$hits") line(s) cite a work period (\"the twelfth session\") or an"
  echo "internal issue number (\"issue 29\"); say what was measured, when and on which machine, or"
  echo "what the issue was about, instead:"
  printf '%s\n' "$hits"
  exit 1
fi
echo "docs_no_diary: ${#files[@]} files checked (README.md, docs/*.md; ${#code[@]} under" \
  "${code_dirs[*]/%//}, without bench/results/): no diary ordinal, no issue number"
exit 0
