# The verbs people type. Each target does the set-up it needs first.
SHELL := /bin/bash
.DEFAULT_GOAL := help
TS_SOURCES := $(shell find services test examples -name '*.ts' -not -path '*/node_modules/*' -not -path '*/dist/*' 2>/dev/null)

.PHONY: help setup build run test test-setup test-unit lint proto proto-check proto-python proto-python-check client-gen client-check config-doc config-doc-check api-report image deploy-image bench clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

# The client's typed tool methods are generated from the compiled registry, then compiled in turn.
CLIENT_GEN := node dist/services/client/codegen/generate-tools.js

dist/.built: node_modules/.package-lock.json tsconfig.json $(TS_SOURCES)
	npx tsc -p tsconfig.json
	$(CLIENT_GEN)
	npx tsc -p tsconfig.json
	scripts/build-examples.sh
	@touch $@

# The exec agent as the one archive backends ship into sandboxes (a deterministic zipapp: same sources, same hash).
AGENT_SOURCES := $(shell find sandbox-image/agent -name '*.py' -not -path '*/tests/*' -not -path '*/__pycache__/*' 2>/dev/null)
AGENT_ARCHIVE := dist/agent/berth_agent.pyz

# The package's directory too: a module removed or renamed changes it, not any remaining file.
$(AGENT_ARCHIVE): $(AGENT_SOURCES) sandbox-image/agent/berth_agent
	python3 sandbox-image/agent/build.py $@

setup: dist/.built $(AGENT_ARCHIVE) ## Install dependencies and build (bin/berth works after this)

build: dist/.built $(AGENT_ARCHIVE) ## Compile TypeScript to dist/ and build the exec agent's archive

# Agents' commands on the local backend run where new tasks start: a workspace of their own, never this checkout.
WORKSPACE ?= $(HOME)/berth-workspace

run: setup ## Start berth serve: dispatcher + local executor on 127.0.0.1:7700; tasks start in WORKSPACE (~/berth-workspace)
	mkdir -p "$(WORKSPACE)"
	TERMINAL_CWD="$(WORKSPACE)" bin/berth serve

test: setup image test-setup ## Run every test tier (Docker, the sandbox image and the tools first); non-zero on any failure or leftover
	BERTH_TEST_REQUIRE_TOOLS=1 bash test/run.sh

test-setup: ## Install (as root on Debian/Ubuntu) or name with the fix every tool the test tiers need
	scripts/test-setup.sh

test-unit: setup ## Unit tests only (fast)
	bash test/run.sh unit

lint: setup ## ESLint with zero warnings, buf lint
	npx eslint --max-warnings 0 .
	npx buf lint

proto: node_modules/.package-lock.json ## Regenerate services/gen from proto/
	npx buf lint
	npx buf generate
	npx buf build -o services/gen/descriptor.binpb

proto-check: proto ## Fail if the committed generated code differs from proto/
	@git diff --exit-code --stat -- services/gen || { echo "services/gen is stale: run 'make proto' and commit"; exit 1; }

# The Python client's stubs come from Debian's protoc and grpc_python_plugin (bookworm: 3.21.12 and 1.51):
# code of that age runs on Debian's python3-grpcio/python3-protobuf and on newer ones from PyPI alike.
PY_GEN := clients/python/berth_client/_gen
proto-python: ## Regenerate the Python client's stubs from proto/ (needs protobuf-compiler protobuf-compiler-grpc)
	@command -v protoc >/dev/null && command -v grpc_python_plugin >/dev/null || { echo "protoc or grpc_python_plugin is missing: apt-get install protobuf-compiler protobuf-compiler-grpc"; exit 1; }
	scripts/gen-python-stubs.sh $(PY_GEN)

proto-python-check: proto-python ## Fail if the committed Python stubs differ from proto/
	@git diff --exit-code --stat -- $(PY_GEN) && test -z "$$(git status --porcelain -- $(PY_GEN))" || { echo "$(PY_GEN) is stale: run 'make proto-python' (protoc $$(protoc --version)) and commit"; exit 1; }

client-gen: dist/.built ## Regenerate services/client/generated from the tool schemas

client-check: client-gen ## Fail if the committed client tool methods differ from the tool schemas
	@git diff --exit-code --stat -- services/client/generated || { echo "services/client/generated is stale: run 'make client-gen' and commit"; exit 1; }

config-doc: dist/.built ## Regenerate the configuration reference in docs/configuration.md from the config schema
	node dist/services/common/config-reference-main.js docs/configuration.md

config-doc-check: config-doc ## Fail if docs/configuration.md's reference differs from the config schema
	@git diff --exit-code --stat -- docs/configuration.md || { echo "docs/configuration.md is stale: run 'make config-doc' and commit"; exit 1; }

api-report: dist/.built ## Regenerate docs/api/*.api.md, the public API of berth/backend-kit and berth/conformance, after a change meant to it
	node dist/test/support/api-report-main.js

image: ## Build the sandbox image (starts Docker and builds its base without a registry where needed)
	scripts/build-image.sh

deploy-image: ## Build the Berth image (deploy/Dockerfile) and the compose stack's Prometheus image, without a registry
	scripts/build-deploy-image.sh

# The test doubles the bench measures some backends against live with the tests: named here, never looked up by the bench.
BENCH_DOUBLES = BERTH_BENCH_STANDINS=dist/test/standins/main.js BERTH_BENCH_APPTAINER=test/fixtures/apptainer-double/apptainer

bench: setup ## Benchmarks beside their baselines into bench-results/ (BENCH_FLAGS=--quick)
	$(BENCH_DOUBLES) bin/berth bench $(BENCH_FLAGS)

clean: ## Remove build output
	rm -rf dist examples/*/dist
