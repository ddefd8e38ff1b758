#!/usr/bin/env bash
# Set up (idempotently) and run the test suite: bash test.sh [pytest options]
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
# A browser for the web page's test (tests/test_web_page.py; it skips without one): Debian's chromium + driver.
if ! dpkg -s chromium chromium-driver >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        echo "test: installing Debian chromium and chromium-driver (the web page's browser test)" >&2
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    else
        echo "test: warning: not root, cannot install chromium (the browser test will be skipped)" >&2
    fi
fi
# SimulEval, the reference evaluator, without its dependency set (it would bring pytest-flake8, which breaks pytest).
if ! .venv/bin/python -c "import simuleval" 2>/dev/null; then
    echo "test: installing simuleval 1.1.4 (reference scorer for the equality tests)" >&2
    .venv/bin/python -m pip install -q --no-deps simuleval==1.1.4 textgrid
    .venv/bin/python -m pip install -q pandas tornado sacrebleu pyyaml soundfile pydub tqdm requests
fi
export HF_HUB_OFFLINE=1
# Two pytest workers (pytest-xdist), each test module whole on one of them: the Ray, server, browser and soak modules
# spend much of their time waiting, the model modules computing. SIMULST_TEST_WORKERS=0 runs in this process alone;
# options given here come after these and win (e.g. -n 0).
exec .venv/bin/python -m pytest -q -n "${SIMULST_TEST_WORKERS:-2}" --dist loadfile "$@"
