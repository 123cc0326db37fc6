# jobdir: a job store in a directory that several processes share.
# `make help` lists the targets.

GO      ?= go
PKGS    ?= ./...
# Extra flags for go test, e.g. make test TESTFLAGS='-run Conformance -v'.
TESTFLAGS ?=
# The test recipe pipes go test into a filter; pipefail keeps go test's status.
SHELL := bash

.PHONY: help demo build test race vet fmt fmt-check tidy-check cross lint staticcheck openapi-lint cover bench bench-peers bench-quick bench-build torture image image-rootfs e2e-deploy clean

help: ## List the targets.
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

demo: ## The main job: build jobdir, submit jobs to the default store (./.jobdir), run a worker until idle, list them.
	@echo "building jobdir (the first build downloads and compiles the dependencies: about a minute)"
	$(GO) build -o bin/jobdir ./cmd/jobdir
	./bin/jobdir submit -- sh -c 'echo hello from job $$JOBDIR_JOB_ID, attempt $$JOBDIR_ATTEMPT'
	./bin/jobdir submit --key demo-report -- sh -c 'sleep 1; echo report written'
	./bin/jobdir submit --key demo-report -- sh -c 'echo not run: the key already names a job'
	./bin/jobdir submit --priority 10 -- sh -c 'echo I jumped the queue'
	./bin/jobdir work --concurrency 2 --exit-when-idle
	./bin/jobdir list --limit 10
	./bin/jobdir logs --key demo-report
	./bin/jobdir stats

build: ## Build every package and the jobdir command into ./bin.
	$(GO) build $(PKGS)
	$(GO) build -o bin/jobdir ./cmd/jobdir

test: vet fmt-check tidy-check cross staticcheck openapi-lint bench-build ## What CI runs: vet, gofmt, go.mod tidiness and staticcheck checks, the darwin cross-build, the OpenAPI document's outside check, the bench module's build, and the race-enabled tests (with the short torture run), a line as each package starts and ends.
	set -o pipefail; $(GO) test -race -count=1 -json $(TESTFLAGS) $(PKGS) | $(GO) run ./internal/testlines

race: test ## Alias of test (the tests always run with -race).

vet: ## go vet.
	$(GO) vet $(PKGS)

fmt: ## Rewrite files with gofmt.
	gofmt -w $$(git ls-files '*.go')

fmt-check: ## Fail if a file is not gofmt-formatted.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

tidy-check: ## Fail if go.mod or go.sum (of this module or of bench/) is not tidy.
	$(GO) mod tidy -diff
	cd bench && $(GO) mod tidy -diff

# docs/openapi.yaml, checked by an outside validator (Redocly's CLI, with
# .ci/redocly.yaml); TestOpenAPIDescribesTheServer checks it against the
# server. .ci/run installs the validator into bin/node; with CI=true a
# missing one fails the check, otherwise it is skipped with a note.
REDOCLY_VERSION ?= 2.77.0
# axe-core, which the dashboard's accessibility check (cmd/jobdir's
# TestUIBrowserAccessibility) loads from bin/node; .ci/run installs it.
AXE_VERSION ?= 4.14.1
REDOCLY ?= bin/node/node_modules/.bin/redocly
openapi-lint: ## Check docs/openapi.yaml with Redocly's CLI (npm install --prefix bin/node @redocly/cli, as .ci/run does).
	@if [ -x "$(REDOCLY)" ]; then \
		REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true $(REDOCLY) lint --config .ci/redocly.yaml docs/openapi.yaml; \
	elif [ "$${CI:-}" = true ]; then \
		echo "openapi-lint: $(REDOCLY) is missing: npm install --prefix bin/node @redocly/cli@$(REDOCLY_VERSION)"; exit 1; \
	else \
		echo "openapi-lint: skipped: no $(REDOCLY) (npm install --prefix bin/node @redocly/cli@$(REDOCLY_VERSION) installs it)"; \
	fi

# Linux is where jobdir is tested; every package must also build for macOS.
# Windows is not supported (README, Platforms): the file store and the job
# logs are built on flock, O_NOFOLLOW and rename(2) over open files, so
# the file store's build stops there with a message, which this checks.
cross: ## Cross-build every package for darwin (arm64) and vet it with its tests (amd64); check that the windows build of filestore says windows is not supported.
	GOOS=darwin GOARCH=arm64 $(GO) build $(PKGS)
	GOOS=darwin GOARCH=amd64 $(GO) vet $(PKGS)
	@GOOS=windows $(GO) build ./filestore 2>&1 | grep -q Windows_is_not_supported || \
		{ echo "cross: the windows build of filestore must stop with a message that says windows is not supported"; exit 1; }
	@echo "cross: windows is not supported (see Platforms in README.md); its build stops with a message that says so"

lint: vet staticcheck ## go vet and staticcheck.

staticcheck: ## staticcheck (pinned as a tool in go.mod).
	$(GO) tool staticcheck $(PKGS)

cover: ## Coverage per package.
	$(GO) test -count=1 -cover $(PKGS)

# Benchmarks. BENCH selects benchmarks, COUNT repeats them for benchstat:
#   make bench COUNT=10 > old.txt; (change); make bench COUNT=10 > new.txt; go tool benchstat old.txt new.txt
BENCH ?= .
COUNT ?= 6
bench: ## Go benchmarks of the hot paths (benchstat-friendly output).
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(COUNT) ./filestore ./memstore ./runner ./httpapi ./execjob

bench-build: ## Build and vet the side-by-side benchmark module (bench/, its own go.mod), and run its short tests (the report and its targets).
	cd bench && $(GO) vet ./... && $(GO) build -o /dev/null ./cmd/jobdir-bench && $(GO) test -short ./...

BENCHFLAGS ?=
bench-peers: ## Side-by-side benchmark against River and goqite on SQLite (about 25 minutes); writes docs/benchmarks/.
	cd bench && $(GO) run ./cmd/jobdir-bench -out ../docs/benchmarks $(BENCHFLAGS)

# The ratio run of the targets: the durable file store against River and
# goqite with synchronous=FULL, and the floor, 3 rounds of -quick at 100
# workers. BENCH_DIR is where the stores go: a fresh journaled ext4 loop
# mount, e.g. make bench-quick BENCH_DIR=/mnt/bench (docs/benchmarks.md).
BENCH_DIR ?= /tmp
BENCH_OUT ?= $(CURDIR)/bin/bench-quick
bench-quick: ## The targets' ratio run (about a minute): durable file store vs River and goqite FULL and the floor, with CPU per job, in BENCH_DIR (/tmp).
	cd bench && $(GO) run ./cmd/jobdir-bench -quick -rounds 3 -jobs 2000 -only insert,batch,workoff,floor \
		-systems jobdir-file,river-full,goqite-full -dir $(abspath $(BENCH_DIR)) -out $(BENCH_OUT) $(BENCHFLAGS)

TORTURE_DURATION ?= 20m
# An operation of a process that is not stopped, slower than TORTURE_MAX_STALL
# while another process is, is a violation of the file store run: a stopped
# process delays only its own jobs (docs/guarantees.md). Empty: counted only.
TORTURE_MAX_STALL ?= 1s
# The PostgreSQL server of the pgstore runs, and how to restart it.
PG_DSN ?= $(or $(JOBDIR_TEST_POSTGRES),host=/var/run/postgresql dbname=test)
PG_RESTART ?= pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main restart
torture: ## The long multi-process torture runs (kills, SIGSTOPs, restarts) on a filestore, then on pgstore with connection cuts and server restarts, and their checks.
	$(GO) run ./cmd/jobdir-torture -long -duration $(TORTURE_DURATION) $(if $(TORTURE_MAX_STALL),-max-stall $(TORTURE_MAX_STALL))
	$(GO) run ./cmd/jobdir-torture -long -duration $(TORTURE_DURATION) -postgres '$(PG_DSN)' -pg-restart '$(PG_RESTART)' -restart-every 2m

.PHONY: e2e-systemd
e2e-systemd: ## Boot systemd in a container (systemd-nspawn, as root) with the units of deploy/systemd, run jobs and stop workers mid-job (about 40 s).
	JOBDIR_E2E_SYSTEMD=1 $(GO) test -count=1 -run '^TestE2ESystemdUnits$$' -v ./cmd/jobdir

# The container image (Containerfile). podman needs no registry and no
# change to /etc: CONTAINERS_CONF points it at deploy/podman/containers.conf.
CONTAINER_ENGINE ?= podman
IMAGE ?= localhost/jobdir:dev
BUSYBOX ?= /bin/busybox
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
export CONTAINERS_CONF ?= $(CURDIR)/deploy/podman/containers.conf

image-rootfs: ## Lay out the image's root file system in bin/image/rootfs: the static jobdir binary and Debian's static busybox (apt-get install busybox-static).
	rm -rf bin/image
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -X main.buildVersion=$(VERSION)' -o bin/image/rootfs/jobdir ./cmd/jobdir
	@test -x $(BUSYBOX) || { echo "image-rootfs: no $(BUSYBOX): apt-get install busybox-static (or make image BUSYBOX=/path/to/a/static/busybox)"; exit 1; }
	sh deploy/image/rootfs.sh $(BUSYBOX) bin/image/rootfs

image: image-rootfs ## Build the container image localhost/jobdir:dev (IMAGE=) with podman (CONTAINER_ENGINE=docker for docker) on FROM scratch: no registry needed.
	@old=$$($(CONTAINER_ENGINE) image inspect --format '{{.Id}}' $(IMAGE) 2>/dev/null); \
	$(CONTAINER_ENGINE) build --no-cache $(if $(filter podman,$(notdir $(CONTAINER_ENGINE))),--layers=false) -f Containerfile --build-arg VERSION='$(VERSION)' --build-arg REVISION='$(REVISION)' -t $(IMAGE) . && \
	if [ -n "$$old" ] && [ "$$old" != "$$($(CONTAINER_ENGINE) image inspect --format '{{.Id}}' $(IMAGE))" ]; then $(CONTAINER_ENGINE) rmi "$$old" >/dev/null 2>&1 || true; fi
	@$(CONTAINER_ENGINE) image inspect --format '{{.Size}}' $(IMAGE) | awk '{printf "image: $(IMAGE), %.1f MB\n", $$1/1e6}'

E2E_TIMEOUT ?= 10m
e2e-deploy: image ## Run deploy/kubernetes with podman kube play (two workers, a server, one volume), kill a worker mid-job, check every job ran once and the store is consistent (about a minute; not in make test).
	JOBDIR_E2E_DEPLOY=1 JOBDIR_E2E_IMAGE=$(IMAGE) $(GO) test -count=1 -timeout $(E2E_TIMEOUT) -v -run TestDeploy ./deploy

clean: ## Remove build output.
	rm -rf bin
