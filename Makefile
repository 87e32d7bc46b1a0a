# The verbs people type. Each target does the set-up it needs first.
SHELL := /bin/bash
.DEFAULT_GOAL := help
TS_SOURCES := $(shell find services test -name '*.ts' -not -path '*/node_modules/*' 2>/dev/null)

.PHONY: help setup build run test test-unit lint proto proto-check proto-python proto-python-check client-gen client-check image deploy-image bench clean

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
	@touch $@

setup: dist/.built ## Install dependencies and build (bin/berth works after this)

build: dist/.built ## Compile TypeScript to dist/

run: setup ## Start berth serve: dispatcher + local executor on 127.0.0.1:7700
	bin/berth serve

test: setup image ## Run every test tier (starts Docker, builds the sandbox image first); non-zero on any failure
	bash test/run.sh

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

image: ## Build the sandbox image (starts Docker and builds its base without a registry where needed)
	scripts/build-image.sh

deploy-image: ## Build the Berth image (deploy/Dockerfile) and the compose stack's Prometheus image, without a registry
	scripts/build-deploy-image.sh

bench: setup ## Benchmarks beside their baselines into test/bench/results/ (BENCH_FLAGS=--quick)
	bin/berth bench $(BENCH_FLAGS)

clean: ## Remove build output
	rm -rf dist
