#!/usr/bin/env bash
# Set up (idempotently) and run the test suite: bash test.sh [pytest options]
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
# SimulEval, the reference evaluator, without its dependency set (it would bring pytest-flake8, which breaks pytest).
if ! .venv/bin/python -c "import simuleval" 2>/dev/null; then
    echo "test: installing simuleval 1.1.4 (reference scorer for the equality tests)" >&2
    .venv/bin/python -m pip install -q --no-deps simuleval==1.1.4 textgrid
    .venv/bin/python -m pip install -q pandas tornado sacrebleu pyyaml soundfile pydub tqdm requests
fi
export HF_HUB_OFFLINE=1
exec .venv/bin/python -m pytest -q "$@"
