#!/usr/bin/env bash
# Idempotent set-up of a fresh machine: Debian packages (as root), a virtualenv in .venv, simulst and its
# dependencies (torch pinned to the local CPU build 2.13.*). Re-running it does nothing when all is in place.
set -euo pipefail
cd "$(dirname "$0")/.."

debian_packages=(espeak-ng apertium apertium-eng-spa sox libportaudio2)
missing=()
for package in "${debian_packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "setup: installing Debian packages: ${missing[*]}" >&2
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "setup: warning: not root, cannot install ${missing[*]} (needed for translation and speech output)" >&2
    fi
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv" >&2
    python3 -m venv .venv
fi
stamp=.venv/.simulst-installed
want="$(sha1sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! .venv/bin/python -c "import simulst" 2>/dev/null; then
    echo "setup: installing simulst and its dependencies into .venv (first run takes a few minutes)" >&2
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e ".[dev]"
    echo "$want" > "$stamp"
fi
