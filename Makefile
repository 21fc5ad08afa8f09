# acpgate — developer entry points. `make install` once, then `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PROTOS := protos/acpgate_contracts/launch/v1/launch.proto protos/acpgate_contracts/session/v1/session.proto protos/acpgate_contracts/lifecycle/v1/lifecycle.proto
PROTO_FLAGS = -Iprotos --python_out=$(1) --grpc_python_out=$(1) --mypy_out=$(1) --mypy_grpc_out=$(1)

.PHONY: install proto proto-check acp-schema acp-names config-docs layout-docs run test test-fast lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# -qq: pip's errors only (a build backend's notices are no news to someone installing).
install: $(PY)
	$(PY) -m pip install -qq -e '.[dev]'
	$(MAKE) --no-print-directory proto-check

# Regenerate the committed gRPC code from protos/.
proto: $(PY)
	PATH=$(abspath $(BIN)):$$PATH $(PY) -m grpc_tools.protoc $(call PROTO_FLAGS,.) $(PROTOS)

# Fail when the committed generated code is missing or differs from protos/.
proto-check: $(PY)
	@tmp=$$(mktemp -d) && \
	PATH=$(abspath $(BIN)):$$PATH $(PY) -m grpc_tools.protoc $(call PROTO_FLAGS,$$tmp) $(PROTOS) >/dev/null 2>&1 && \
	for f in $$(cd $$tmp && find acpgate_contracts -type f); do \
	  cmp -s $$tmp/$$f $$f || { echo "generated code is stale or missing: $$f (run 'make proto')"; rm -rf $$tmp; exit 1; }; \
	done; rm -rf $$tmp; echo "generated gRPC code is up to date"

# Regenerate the committed ACP models (services/common/acp/schema.py) from protos/acp/.
acp-schema: $(PY)
	$(PY) tools/gen_acp_schema.py

# Regenerate ACP's method names and update kinds (services/common/acp/names.py) from protos/acp/.
acp-names: $(PY)
	$(PY) tools/gen_acp_names.py

# Regenerate the configuration reference (docs/configuration.md) from the config schema.
config-docs: $(PY)
	$(PY) tools/gen_config_docs.py

# Regenerate the layout page (docs/layout.md) from each package's docstring.
layout-docs: $(PY)
	$(PY) tools/gen_layout.py

# Silent (@): stdout is the ACP protocol, nothing may come before the first frame.
run: $(PY)
	@exec $(BIN)/acpgate acp

# -rs: every skipped test says why (e.g. no PostgreSQL server binaries).
# Test files run in TEST_WORKERS processes (pytest-xdist, a file per worker at a time: its
# fixtures stay together); a short base directory keeps the unix sockets the tests' installs
# create under the kernel's 107-byte limit.
TEST_WORKERS ?= 2
test: $(PY)
	$(PY) -m pytest -q -rs -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile \
		--basetemp="$$(mktemp -d /tmp/acpt-XXXXXX)"

# The inner loop: every test not marked slow (no real acpgate processes; ~1 min on 2 cores).
test-fast: $(PY)
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow and not realagents" \
		--basetemp="$$(mktemp -d /tmp/acpt-XXXXXX)"

lint: $(PY)
	$(BIN)/ruff check acpgate services tests bench tools
	$(BIN)/mypy acpgate services tools

bench: $(PY)
	$(PY) -m bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
