#!/usr/bin/env bash
# Set up (idempotently) and run simulst: bash run.sh transcribe|translate AUDIO [options]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/scripts/setup.sh"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
exec "$here/.venv/bin/simulst" "$@"
