#!/usr/bin/env bash
# Screenshots of the documentation site in headless Chromium, to check by eye what `mkdocs build
# --strict` cannot: figures, wide tables and code blocks that fit or scroll inside their box, lists
# that nest. Not part of `make test` (CI has only Python and pip).
#
#   make docs-screenshots                     # every page, 1280 and 820 wide, into screenshots/
#   HEIGHT=4000 scripts/docs_screenshots.sh    # taller shots (900 px by default): more of each page
#   scripts/docs_screenshots.sh OUT PAGE...   # some pages, e.g. explanation/benchmarks/
#
# Needs Chromium (Debian/Ubuntu: apt-get install chromium) and the site built into site/ (make docs).
# The site is served from site/ on a free loopback port for the run; nothing leaves the machine.
set -euo pipefail

out=${1:-screenshots}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
site="$root/site"
python=${PYTHON:-"$root/.venv/bin/python"}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "docs_screenshots: no chromium on PATH (apt-get install chromium)" >&2; exit 2; }
[ -f "$site/index.html" ] || { echo "docs_screenshots: no $site/index.html: run make docs first" >&2; exit 2; }

if [ $# -eq 0 ]; then  # every page of the site
    mapfile -t pages < <(cd "$site" && find . -name index.html ! -path './assets/*' ! -path './search/*' \
        | sed -e 's|^\./||' -e 's|index\.html$||' | sort)
else
    pages=("$@")
fi

port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$python" -m http.server "$port" --bind 127.0.0.1 --directory "$site" >/dev/null 2>&1 &
server=$!
profile=$(mktemp -d)
trap 'kill "$server" 2>/dev/null; rm -rf "$profile"' EXIT
for _ in $(seq 50); do
    "$python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/', timeout=1)" \
        2>/dev/null && break
    sleep 0.1
done

mkdir -p "$out"
for page in "${pages[@]}"; do
    name=${page%/}
    name=${name//\//_}
    name=${name:-index}
    for width in 1280 820; do
        # --virtual-time-budget lets the page's scripts and images settle before the shot
        "$browser" --headless --no-sandbox --disable-gpu --disable-background-networking \
            --disable-component-update --disable-sync --no-first-run \
            --user-data-dir="$profile" --virtual-time-budget=3000 \
            --window-size="$width,${HEIGHT:-900}" --screenshot="$out/$name-$width.png" \
            "http://127.0.0.1:$port/$page" >/dev/null 2>&1
    done
    echo "$out/$name-{1280,820}.png"
done
