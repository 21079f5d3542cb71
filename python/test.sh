#!/usr/bin/env bash
# Builds the fencelock Python package into python/.venv and runs its tests against the real
# servers (Redis on 127.0.0.1:6379, PostgreSQL on 127.0.0.1:5432). Arguments go to pytest;
# the exit code is pytest's. PYTHON picks the interpreter (default python3, 3.9 or newer).
set -euo pipefail
cd "$(dirname "$0")"

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt

# An editable install: the extension is built (debug profile, quick on two cores) into
# fencelock/ and the venv points at this folder. --locked: python/Cargo.lock is the truth.
VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" .venv/bin/maturin develop --locked --quiet

set +e
.venv/bin/pytest "$@"
status=$?
set -e
exit "$status"
