# pbx: build, run, test and package the PBX appliance.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X pbx/appliance/buildinfo.Version=$(VERSION)
QUICKSTART := packaging/quickstart

# Debian packages the tests drive as real peers: SIPp plays phones and carriers,
# sipvicious (svcrack) the password guesser the security guard must ban; espeak-ng
# speaks the voicemail prompts for the prompt generator's test.
TEST_DEBS := sip-tester:sipp sipvicious:svcrack baresip:baresip linphone-cli:linphonec chromium:chromium espeak-ng:espeak-ng
# ... and what the benchmarks add: wrk loads the HTTP API.
BENCH_DEBS := $(TEST_DEBS) wrk:wrk
# ... and the reference bench-compare measures the PBX against: Kamailio and
# rtpengine's userspace daemon.
COMPARE_DEBS := sip-tester:sipp kamailio:kamailio rtpengine-daemon:rtpengine

.PHONY: all build run test test-go test-deps bench-deps compare-deps test-package bench bench-compare lint cross package clean prompts

all: build

build:
	@mkdir -p bin
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/pbx ./cmd/pbx
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/pbxctl ./cmd/pbxctl

# Rebuilds the embedded voicemail prompt set with the local espeak-ng (offline);
# commit the WAV files it rewrites.
prompts:
	cd appliance/prompts && $(GO) generate

# Runs the PBX on the bundled quickstart configuration: loopback only.
run: build
	bin/pbx run --config $(QUICKSTART)

# The whole suite: static checks, package and end-to-end tests against the built
# binaries, then the package install test (debootstrap; needs root).
test: test-deps lint build test-go test-package

test-go:
	PBX_BIN=$(CURDIR)/bin $(GO) test -count=1 -timeout 15m ./...

# Installs, with apt-get, whatever the tests (bench-deps: the benchmarks) need and is
# missing. Quiet when present.
DEBS = $(TEST_DEBS)
bench-deps: DEBS = $(BENCH_DEBS)
compare-deps: DEBS = $(COMPARE_DEBS)
test-deps bench-deps compare-deps:
	@missing=""; for d in $(DEBS); do pkg=$${d%%:*}; cmd=$${d##*:}; \
	  PATH="$$PATH:/usr/sbin:/sbin" command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# One package at a time (-p 1): the end-to-end load figures need the machine.
# The side-by-side comparison is bench-compare's, with its own dependencies.
bench: bench-deps build
	PBX_BIN=$(CURDIR)/bin $(GO) test -p 1 -run '^$$' -bench . -skip '^BenchmarkCompare' -benchmem -timeout 30m ./...

# Side by side with Kamailio and rtpengine from Debian, in one run of about
# 20 to 25 minutes; the table, with each target of issue 16 and whether the
# PBX met it, is printed at the end. PBX_COMPARE_* variables size it (see the
# README's Development section).
bench-compare: compare-deps build
	PBX_BIN=$(CURDIR)/bin $(GO) test -run '^$$' -bench Compare -benchtime 1x -timeout 40m ./appliance/e2e

# staticcheck is run at a pinned version from the module proxy, so every machine
# checks with the same rules without installing it first.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.0

# The product ships for Linux, but developers build and vet it on macOS too:
# each Linux-only call has a _linux.go file and a portable _other.go twin.
cross:
	GOOS=darwin GOARCH=arm64 $(GO) vet ./...

lint: cross
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) mod tidy -diff

package: build
	VERSION='$(VERSION)' packaging/build-packages.sh

test-package: package
	packaging/test-install.sh

clean:
	rm -rf bin dist
