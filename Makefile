# jobdir: a job store in a directory that several processes share.
# `make help` lists the targets.

GO      ?= go
PKGS    ?= ./...
# Extra flags for go test, e.g. make test TESTFLAGS='-run Conformance -v'.
TESTFLAGS ?=

.PHONY: help build test race vet fmt fmt-check lint cover clean

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## Build every package and the jobdir command into ./bin.
	$(GO) build $(PKGS)
	$(GO) build -o bin/jobdir ./cmd/jobdir

test: vet fmt-check ## What CI runs: vet, a gofmt check, and the race-enabled tests.
	$(GO) test -race -count=1 $(TESTFLAGS) $(PKGS)

race: test ## Alias of test (the tests always run with -race).

vet: ## go vet.
	$(GO) vet $(PKGS)

fmt: ## Rewrite files with gofmt.
	gofmt -w $$(git ls-files '*.go')

fmt-check: ## Fail if a file is not gofmt-formatted.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint: vet ## staticcheck (pinned as a tool in go.mod).
	$(GO) tool staticcheck $(PKGS)

cover: ## Coverage per package.
	$(GO) test -count=1 -cover $(PKGS)

clean: ## Remove build output.
	rm -rf bin
