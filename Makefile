# lds — the two commands a newcomer needs are `make demo` and `make test`.
GO        ?= go
PKGS      := ./...
BIN       := bin
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
# golangci-lint, built from its Go module into bin/tools by `make lint`.
GOLANGCI_LINT_VERSION      := v2.15.0
GOLANGCI_LINT              := $(BIN)/tools/golangci-lint
# nfpm (goreleaser's packager), built from its Go module into bin/tools by
# `make deb`. v2.44.1: the newer releases need modules the Go module proxy
# does not serve (go.digitalxero.dev/...).
NFPM_VERSION               := v2.44.1
NFPM                       := $(BIN)/tools/nfpm
# The version the binaries print (--version) and the package carries: from
# `git describe`, or 0.1.0-dev outside a git checkout.
VERSION     := $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.1.0-dev)
LDFLAGS     := -X github.com/lds-net/lds/internal/version.Version=$(VERSION)
# Debian's version of it: scripts/deb-version.sh.
DEB_VERSION := $(shell sh scripts/deb-version.sh '$(VERSION)')
DEB_ARCH    := $(shell $(GO) env GOARCH)
DEB         := dist/lds_$(DEB_VERSION)-1_$(DEB_ARCH).deb
# Packages whose code runs goroutines of its own: `make test` runs them again
# under the race detector (cgo: gcc).
RACE_PKGS := ./internal/sketch/ ./internal/export/ ./internal/receiver/ ./internal/sender/ ./internal/interval/ ./internal/replay/ ./internal/capture/ ./internal/wire/ ./internal/tap/
# Packages with live tests on veths and real-time paced pipelines, whose
# checks fail on a loaded machine (docs/testbed.md): `make test` runs them
# one package at a time, after the CPU-heavy ones and apart from them.
QUIET_PKGS := internal/capture tools/linkem cmd/lds-receiver internal/receiver
# Debian packages the tests use for real components (installed when run as root).
DEB_PKGS  := gcc libpcap-dev protobuf-compiler linuxptp prometheus tcpdump iproute2 util-linux systemd ethtool openssl nfdump pmacct debootstrap systemd-container curl iperf3 iputils-ping jq lintian

.PHONY: deb nfpm-tool all build demo test test-short bench bench-live bench-replay bench-memory lint lint-tool generate deps install clean eval-paper e2e-live e2e-deploy e2e-real

all: build

build:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# deb: the Debian package dist/lds_<version>_<arch>.deb, made by nfpm from
# packaging/deb/nfpm.yaml (docs/operations.md, "Debian package"). The units
# and the ptp4l drop-in are staged with the package's paths (/usr/bin,
# /usr/lib/lds) instead of make install's /usr/local ones.
deb: nfpm-tool
	rm -rf dist/pkgroot && mkdir -p dist/pkgroot/bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS) -s -w' -o dist/pkgroot/bin/ ./cmd/...
	for f in lds-sender.service lds-receiver.service; do \
		sed -e 's|/usr/local/bin/|/usr/bin/|g' deploy/systemd/$$f > dist/pkgroot/$$f; done
	sed -e 's|/usr/local/lib/lds/|/usr/lib/lds/|g' -e 's|Installed by lds (the package, or `make install`)|Installed by the lds package|' \
		-e 's|/etc/systemd/system/ptp4l@.service.d/|/lib/systemd/system/ptp4l@.service.d/|g' \
		deploy/systemd/ptp4l@.service.d/lds.conf > dist/pkgroot/ptp4l-lds.conf
	printf 'lds (%s-1) unstable; urgency=medium\n\n  * Built from %s with make deb.\n\n -- lds maintainers <maintainers@users.noreply.a-seed-fe031387.example>  %s\n' \
		'$(DEB_VERSION)' '$(VERSION)' "$$(date -R -d @$$(git log -1 --format=%ct 2>/dev/null || date +%s))" \
		| gzip -9n > dist/pkgroot/changelog.Debian.gz
	rm -f dist/lds_*.deb
	LDS_DEB_VERSION='$(DEB_VERSION)' LDS_DEB_ARCH='$(DEB_ARCH)' $(NFPM) package --config packaging/deb/nfpm.yaml --packager deb --target $(DEB)
	@echo "$(DEB)"

nfpm-tool:
	@$(GO) version -m $(NFPM) 2>/dev/null | grep -Eq "^[[:space:]]+mod[[:space:]]+github.com/goreleaser/nfpm/v2[[:space:]]+$(NFPM_VERSION)[[:space:]]" || { \
		echo "building nfpm $(NFPM_VERSION) into $(BIN)/tools"; \
		GOBIN=$(CURDIR)/$(BIN)/tools $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION) || { \
		echo "make deb: cannot build nfpm $(NFPM_VERSION); it needs the Go module proxy (GOPROXY=$$($(GO) env GOPROXY)) or the module in the module cache"; exit 1; }; }

# deps installs what the tests need: Debian packages when root, Go modules always.
deps:
	@bash scripts/deps.sh $(DEB_PKGS)
	$(GO) mod download

demo: build
	@bash scripts/demo.sh

test: deps lint
	CGO_ENABLED=0 $(GO) build ./...
	$(GO) test -count=1 -timeout 20m $$($(GO) list $(PKGS) | grep -v -e '/deploy/systemd$$' -e '/test/e2e$$' $(foreach p,$(QUIET_PKGS),-e '/$(p)$$'))
	# The live packages one at a time, with no other package loading the cores.
	$(GO) test -count=1 -p 1 -timeout 20m $(foreach p,$(QUIET_PKGS),./$(p)/)
	# The real-traffic testbeds on their own: their truth checks need a
	# machine that no CPU-heavy package test is loading at the same time.
	$(GO) test -count=1 -timeout 25m ./test/e2e/
	# The two-host deployment (two systemd-booted containers) on its own, so
	# that its load does not overlap the timing-sensitive live tests.
	$(GO) test -count=1 -timeout 15m ./deploy/systemd/
	$(GO) test -count=1 -timeout 10m -tags pcap ./internal/capture/...
	# The packages with goroutines of their own, again under the race detector.
	$(GO) test -race -count=1 -timeout 10m $(RACE_PKGS)

test-short:
	$(GO) test -short -count=1 $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./internal/...

# lint: gofmt, go vet and golangci-lint at the pinned version with the
# committed .golangci.yml, on the default build and on the pcap-tagged capture
# code. Nothing is skipped: lint-tool builds the pinned golangci-lint from its
# Go module when bin/tools lacks it, and a failed build fails.
lint: lint-tool
	@files="$$(git ls-files '*.go' 2>/dev/null)"; [ -n "$$files" ] || files="$$(find . -name '*.go' -not -path './bin/*' -not -path './dist/*' -not -path './out/*')"; \
	out="$$(gofmt -l $$files)"; test -z "$$out" || { echo "gofmt needed on (run gofmt -w on them):"; echo "$$out"; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags pcap ./internal/capture/...
	$(GOLANGCI_LINT) run ./...
	$(GOLANGCI_LINT) run --build-tags pcap ./internal/capture/...

lint-tool:
	@$(GOLANGCI_LINT) version 2>/dev/null | grep -q "version $(patsubst v%,%,$(GOLANGCI_LINT_VERSION)) " || { \
		echo "building golangci-lint $(GOLANGCI_LINT_VERSION) into $(BIN)/tools (minutes the first time)"; \
		GOBIN=$(CURDIR)/$(BIN)/tools $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) || { \
		echo "make lint: cannot build golangci-lint $(GOLANGCI_LINT_VERSION); it needs the Go module proxy (GOPROXY=$$($(GO) env GOPROXY)) or the module in the module cache: fix the network or GOPROXY, then run make lint again"; exit 1; }; }

# generate regenerates the committed protobuf code with pinned plugins.
generate:
	GOBIN=$(CURDIR)/$(BIN)/tools $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(CURDIR)/$(BIN)/tools $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH=$(CURDIR)/$(BIN)/tools:$$PATH protoc -I proto \
		--go_out=. --go_opt=module=github.com/lds-net/lds \
		--go-grpc_out=. --go-grpc_opt=module=github.com/lds-net/lds \
		proto/lds/v1/lds.proto
	PATH=$(CURDIR)/$(BIN)/tools:$$PATH protoc -I proto \
		--go_out=. --go_opt=module=github.com/lds-net/lds \
		proto/lds/export/v1/flow.proto

install: build
	install -d $(DESTDIR)/usr/local/bin $(DESTDIR)/etc/lds $(DESTDIR)/etc/systemd/system
	install -m 0755 $(BIN)/lds-sender $(BIN)/lds-receiver $(BIN)/ldsctl $(DESTDIR)/usr/local/bin/
	# An existing (edited) configuration is kept: the new example goes beside it as .new.
	@for f in sender.yaml receiver.yaml; do \
		if [ -e $(DESTDIR)/etc/lds/$$f ]; then \
			install -m 0644 configs/$$f $(DESTDIR)/etc/lds/$$f.new && echo "kept $(DESTDIR)/etc/lds/$$f; the new example is $$f.new"; \
		else install -m 0644 configs/$$f $(DESTDIR)/etc/lds/; fi; \
	done
	# The units' Documentation= names the README installed here.
	for f in lds-sender.service lds-receiver.service; do \
		sed -e 's|file:///usr/share/doc/lds/|file:///usr/local/share/doc/lds/|' deploy/systemd/$$f > $(DESTDIR)/etc/systemd/system/$$f && \
		chmod 0644 $(DESTDIR)/etc/systemd/system/$$f; done
	install -d $(DESTDIR)/usr/local/share/doc/lds
	install -m 0644 README.md $(DESTDIR)/usr/local/share/doc/lds/
	cp -r docs $(DESTDIR)/usr/local/share/doc/lds/ && chmod -R u=rwX,go=rX $(DESTDIR)/usr/local/share/doc/lds/docs
	# Debian's ptp4l@.service: hand ptp4l's root-only management socket to group lds (docs/ptp.md).
	install -d $(DESTDIR)/usr/local/lib/lds $(DESTDIR)/etc/systemd/system/ptp4l@.service.d
	install -m 0755 deploy/systemd/lds-ptp4l-socket $(DESTDIR)/usr/local/lib/lds/
	install -m 0644 deploy/systemd/ptp4l@.service.d/lds.conf $(DESTDIR)/etc/systemd/system/ptp4l@.service.d/

# eval-paper: the LDS paper's experiments at paper scale (minutes; not in CI).
eval-paper: build
	@bash scripts/eval-paper.sh

# e2e-live: a longer run on a real kernel link between network namespaces (root).
e2e-live: build
	@bash scripts/e2e-live.sh

# e2e-real: real TCP/UDP/ping/HTTP through a congested Linux router (root;
# LDS_REAL_SECONDS of traffic per run, default 120).
e2e-real: build
	@bash scripts/e2e-real.sh

# e2e-deploy: the README's two-host deployment on two Debian 12 hosts booted
# with systemd-nspawn (root; `make test` runs it too). LDS_DEPLOY_DIR=DIR
# keeps the hosts' files (journals in DIR/lds-*/var/log/journal).
e2e-deploy:
	$(GO) test -count=1 -v -timeout 15m -run TestTwoHostDeployment ./deploy/systemd/

# bench-live: lds-sender against tcpdump on a real veth at the highest rate (root).
bench-live: build
	@bash scripts/bench-live.sh

# bench-replay: ldsctl replay against the exact per-packet join, 1M packets.
bench-replay: build
	@bash scripts/bench-replay.sh

# bench-memory: peak RSS of ldsctl replay at over 1M flows an interval against
# the bound of 'ldsctl memory' for the same configuration (~2 min, 1.8 GB of captures).
bench-memory: build
	@GO=$(GO) bash scripts/bench-memory.sh

clean:
	rm -rf $(BIN) out dist
