# FlexGV build: Go and a C compiler only (no CUDA toolkit).
#   make          shim, simulated GPU, CLI and test clients into build/
#   make check    everything above, then the fast tests (unit tests and the
#                 simulated-GPU tests that take seconds): a few minutes
#   make test     everything above, then every test, with progress
#   make test-k8s the Kubernetes tests alone (tests/k8s: a control plane built
#                 once from the pinned k8s.io/kubernetes release, then cached)
#   make proto    regenerate the local API's Go code from proto/ (needs protoc)
#   make image    FlexGV's container image from the build, with no container
#                 engine: build/image/oci (OCI layout) and build/image/flexgv.tar
#   make demo     on the simulated GPU: a workload under flexgv trace --log, a memory
#                 quota, shares, a cap and priority between tenants
#                 (REAL_GPU=1: the trace alone, on the machine's real driver)

BUILD    ?= build
CC       ?= cc
GO       ?= go
# GOTAGS=nok8s: a CLI without the Kubernetes commands, a third the size (for
# GPU machines, where build/ travels).
GOTAGS   ?=
CFLAGS   ?= -O2 -g
WARN     := -Wall -Wextra -Werror -std=gnu11
# NVIDIA's nvml.h as shipped in the go-nvml module (fetched if needed).
NVML_INC := $(shell $(GO) mod download github.com/NVIDIA/go-nvml >/dev/null 2>&1; \
                    $(GO) list -m -f '{{.Dir}}' github.com/NVIDIA/go-nvml)/gen/nvml
INCS     := -Iinclude -Iinclude/flexgv -I$(NVML_INC)

SHIM_SRC := $(wildcard shim/*.c)
SIM_SRC  := simgpu/state.c simgpu/core.c simgpu/memory.c simgpu/exec.c simgpu/capture.c simgpu/graph.c simgpu/exports.c simgpu/tensormap.c simgpu/hostfn.c simgpu/texture.c simgpu/link.c simgpu/userobj.c simgpu/green.c simgpu/procs_gen.c
HDRS     := $(wildcard include/flexgv/*.h include/flexgv/*.def shim/*.h shim/*.inc simgpu/*.h)
# The test clients (tests/clients), a line each so that additions merge.
CLIENTS  :=
CLIENTS  += devprint
CLIENTS  += rtlike
CLIENTS  += direct
CLIENTS  += dlsymclient
CLIENTS  += threads
CLIENTS  += forker
CLIENTS  += nvmlclient
CLIENTS  += nvmlremote
CLIENTS  += nocuda
CLIENTS  += hostcopy
CLIENTS  += launchloop
CLIENTS  += nextlib_user
CLIENTS  += hookmap
CLIENTS  += holder
CLIENTS  += memclient
CLIENTS  += drvclient
CLIENTS  += captureclient
CLIENTS  += exportclient
CLIENTS  += cudartclient
CLIENTS  += optclient
CLIENTS  += blaslike
CLIENTS  += spinner
CLIENTS  += copier
CLIENTS  += procutil
CLIENTS  += hostfunc
CLIENTS  += mapped
CLIENTS  += pinnedbig
CLIENTS  += ipcclient
CLIENTS  += memset2d
CLIENTS  += copy3d
CLIENTS  += waiters
CLIENTS  += nvmlprocs
CLIENTS  += kparamdump
CLIENTS  += lanes
CLIENTS  += smcount
CLIENTS  += ddprank
CLIENTS  += suspendee
CLIENTS  += ckptctl
CLIENTS  += families
CLIENTS  += procnames
CLIENTS  += managed
CLIENTS  += arrays
CLIENTS  += graphnodes
CLIENTS  += linker
CLIENTS  += zeroes
CLIENTS  += mover
CLIENTS  += streamer
CLIENTS  += greenctx
GO_SRC   := $(shell find cmd internal proto -name '*.go') go.mod go.sum

.PHONY: all shim sim cli clients remote image test demo clean gen-check FORCE
all: shim sim cli clients remote
FORCE:

shim: $(BUILD)/lib/libflexgv.so
sim: $(BUILD)/sim/libcuda.so.1 $(BUILD)/sim/libnvidia-ml.so.1 $(BUILD)/sim/bin/nvidia-cuda-mps-control
cli: $(BUILD)/bin/flexgv
clients: $(addprefix $(BUILD)/tests/,$(CLIENTS)) $(BUILD)/tests/libnextlib.so

$(BUILD)/lib/libflexgv.so: $(SHIM_SRC) $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) -fPIC -shared -fvisibility=hidden -include shim/glibc_floor.h $(INCS) \
		-o $@ $(SHIM_SRC) -Wl,--no-as-needed -ldl -Wl,-Bsymbolic-functions -Wl,-z,now

$(BUILD)/sim/libcuda.so.1: $(SIM_SRC) $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) -fPIC -shared -fvisibility=hidden $(INCS) -Wl,-soname,libcuda.so.1 \
		-Wl,-Bsymbolic-functions -o $@ $(SIM_SRC) -lpthread
	ln -sf libcuda.so.1 $(BUILD)/sim/libcuda.so

$(BUILD)/sim/libnvidia-ml.so.1: simgpu/nvml.c simgpu/state.c $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) -fPIC -shared -fvisibility=hidden $(INCS) -Wl,-soname,libnvidia-ml.so.1 \
		-Wl,-Bsymbolic-functions -o $@ simgpu/nvml.c simgpu/state.c -lpthread
	ln -sf libnvidia-ml.so.1 $(BUILD)/sim/libnvidia-ml.so

# The simulated MPS control daemon, on PATH for whoever runs MPS there.
$(BUILD)/sim/bin/nvidia-cuda-mps-control: simgpu/mps_control.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(WARN) -o $@ $<

# flexgv version: the commit (-dirty for a modified tree) and the build day
# (a day, not a time, so that go build relinks once a day, not every make);
# VERSION=NAME names a release.
COMMIT     := $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
BUILD_DATE := $(shell date -u +%Y-%m-%d)
CLI_PKG    := github.com/flexgv/flexgv/internal/cli
LDFLAGS    := $(if $(COMMIT:-dirty=),-X $(CLI_PKG).Commit=$(COMMIT) -X $(CLI_PKG).BuildDate=$(BUILD_DATE)) \
              $(if $(VERSION),-X $(CLI_PKG).Version=$(VERSION))

# The image the Helm chart runs (tools/image): the CLI, the shim, the remote
# files and what they run with from this machine; the same files give the
# same digest. IMAGE_TAG names it in flexgv.tar.
IMAGE_TAG ?= flexgv:dev
image: shim cli remote
	$(GO) run ./tools/image -build $(BUILD) -out $(BUILD)/image -tag $(IMAGE_TAG)

# Always asked of go build (its cache decides), so that GOTAGS changes are seen.
$(BUILD)/bin/flexgv: $(GO_SRC) FORCE
	@mkdir -p $(@D)
	CGO_CFLAGS="-O2 -Wno-deprecated-declarations" $(GO) build -tags "$(GOTAGS)" -ldflags "$(LDFLAGS)" -o $@ ./cmd/flexgv

# Remote GPUs: the client libcuda.so.1 a program loads instead of the
# driver, and the executor flexgv serve starts per connection.
REMOTE_HDRS   := $(wildcard remote/*.h remote/client/*.h remote/executor/*.h) $(HDRS)
REMOTE_CLIENT := remote/wire.c remote/ring.c remote/sha256.c $(wildcard remote/client/*.c)
REMOTE_EXEC   := remote/wire.c remote/ring.c remote/sha256.c $(wildcard remote/executor/*.c)
remote: $(BUILD)/remote/libcuda.so.1 $(BUILD)/remote/libnvidia-ml.so.1 $(BUILD)/remote/flexgv-executor \
	$(BUILD)/remote/libnvcuvid.so.1 $(BUILD)/remote/bin/nvidia-smi $(BUILD)/bench/executor-checks \
	$(BUILD)/asan/remote/libcuda.so.1 $(BUILD)/asan/memclient
# The executor's decoding without its connection (bench/executor-checks.sh),
# built with the rest so that it keeps up with the executor's files.
EXEC_CHECKS   := bench/executor_checks.c remote/wire.c remote/sha256.c \
	$(filter-out remote/executor/main.c remote/executor/stage.c remote/executor/heap.c \
	remote/executor/hostfn.c remote/executor/move.c remote/executor/ahead.c,$(wildcard remote/executor/*.c))

$(BUILD)/remote/libcuda.so.1: $(REMOTE_CLIENT) $(REMOTE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) -fPIC -shared -fvisibility=hidden $(INCS) -Wl,-soname,libcuda.so.1 \
		-Wl,-Bsymbolic-functions -Wl,-z,now -o $@ $(REMOTE_CLIENT) -lpthread
	ln -sf libcuda.so.1 $(BUILD)/remote/libcuda.so

# Built with AddressSanitizer: the client, preloaded with its runtime (the
# path in asan/preload), so that a read or write past a buffer ends the
# program (TestRemoteClientSurvivesSpoiledAnswers), and a test program, as
# users build theirs, held to its quota (TestAnEarlyLookupKeepsTheQuota).
ASAN := -O1 -g -fsanitize=address -fno-omit-frame-pointer
$(BUILD)/asan/preload:
	@mkdir -p $(@D)
	test -e "$$($(CC) -print-file-name=libasan.so)" || { echo "no libasan.so for $(CC): install libasan8" >&2; exit 1; }
	$(CC) -print-file-name=libasan.so >$@
$(BUILD)/asan/remote/libcuda.so.1: $(REMOTE_CLIENT) $(REMOTE_HDRS) $(BUILD)/asan/preload
	@mkdir -p $(@D)
	$(CC) $(ASAN) $(WARN) -fPIC -shared -fvisibility=hidden $(INCS) -Wl,-soname,libcuda.so.1 \
		-Wl,-Bsymbolic-functions -Wl,-z,now -o $@ $(REMOTE_CLIENT) -lpthread
$(BUILD)/asan/memclient: tests/clients/memclient.c tests/clients/common.h $(HDRS) $(BUILD)/sim/libcuda.so.1 $(BUILD)/asan/preload
	$(CC) $(ASAN) $(WARN) $(INCS) -o $@ $< -L$(BUILD)/sim -lcuda -ldl -lpthread

# Its NVML: answers through the client libcuda.so.1 beside it (rpath
# $ORIGIN); the entry points of nvml.h it does not answer are stubs, listed
# from the header.
REMOTE_NVML := remote/nvml/nvml.c remote/nvml/stubs.c
$(BUILD)/gen/nvml_names.def: $(NVML_INC)/nvml.h
	@mkdir -p $(@D)
	sed -nE 's/^(DEPRECATED\([^)]*\)[[:space:]]+)?nvmlReturn_t[[:space:]]+DECLDIR[[:space:]]+(nvml[A-Za-z0-9_]+)[[:space:]]*\(.*/X(\2)/p' $< | sort -u >$@

$(BUILD)/remote/libnvidia-ml.so.1: $(REMOTE_NVML) $(BUILD)/gen/nvml_names.def $(BUILD)/remote/libcuda.so.1 remote/client/integrity_devices.h $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) -fPIC -shared -fvisibility=hidden $(INCS) -I$(BUILD)/gen -Wl,-soname,libnvidia-ml.so.1 \
		-Wl,-Bsymbolic-functions -Wl,-rpath,'$$ORIGIN' -o $@ $(REMOTE_NVML) -L$(BUILD)/remote -lcuda -lpthread
	ln -sf libnvidia-ml.so.1 $(BUILD)/remote/libnvidia-ml.so

# The video decoder's library, absent (remote/novideo): its one dependency,
# named for why, is made only to be linked against.
NOVIDEO := flexgv-remote-gpus-carry-no-video-engines.so
$(BUILD)/remote/libnvcuvid.so.1: remote/novideo/libnvcuvid.c
	@mkdir -p $(@D)/.novideo
	$(CC) -shared -o $(@D)/.novideo/$(NOVIDEO) -Wl,-soname,$(NOVIDEO) -x c /dev/null
	$(CC) $(CFLAGS) -fPIC -shared -Wl,-soname,libnvcuvid.so.1 -Wl,--no-as-needed -o $@ $< $(@D)/.novideo/$(NOVIDEO)
	rm -rf $(@D)/.novideo

# nvidia-smi of remote GPUs (NVIDIA's refuses the client's NVML): on the
# PATH of flexgv run --remote, at /usr/bin/nvidia-smi in remote pods.
$(BUILD)/remote/bin/nvidia-smi: remote/smi/nvidia_smi.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(INCS) -o $@ $< -ldl

$(BUILD)/remote/flexgv-executor: $(REMOTE_EXEC) $(REMOTE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(INCS) -o $@ $(REMOTE_EXEC) -ldl

$(BUILD)/bench/executor-checks: $(EXEC_CHECKS) $(REMOTE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(INCS) -Iremote/executor -o $@ $(EXEC_CHECKS) -ldl -lpthread

$(BUILD)/tests/%: tests/clients/%.c tests/clients/common.h tests/clients/variants_gen.h $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(INCS) -o $@ $< $(CLIENT_LDFLAGS) -ldl -lpthread
# Its pthread_create is the one the shim looks up.
$(BUILD)/tests/hostcopy: CLIENT_LDFLAGS := -rdynamic

# Linked with libcuda, like programs built with -lcuda.
LCUDA_CLIENTS :=
LCUDA_CLIENTS += devprint
LCUDA_CLIENTS += lanes
LCUDA_CLIENTS += families
LCUDA_CLIENTS += greenctx
LCUDA_CLIENTS += smcount
LCUDA_CLIENTS += direct
LCUDA_CLIENTS += forker
LCUDA_CLIENTS += holder
LCUDA_CLIENTS += memclient
LCUDA_CLIENTS += drvclient
LCUDA_CLIENTS += captureclient
LCUDA_CLIENTS += spinner
LCUDA_CLIENTS += copier
LCUDA_CLIENTS += optclient
LCUDA_CLIENTS += blaslike
LCUDA_CLIENTS += hostfunc
LCUDA_CLIENTS += mapped
LCUDA_CLIENTS += pinnedbig
LCUDA_CLIENTS += ipcclient
LCUDA_CLIENTS += memset2d
LCUDA_CLIENTS += copy3d
LCUDA_CLIENTS += waiters
LCUDA_CLIENTS += ddprank
LCUDA_CLIENTS += suspendee
LCUDA_CLIENTS += ckptctl
LCUDA_CLIENTS += managed
LCUDA_CLIENTS += arrays
LCUDA_CLIENTS += graphnodes
LCUDA_CLIENTS += linker
LCUDA_CLIENTS += mover
LCUDA_CLIENTS += streamer
$(addprefix $(BUILD)/tests/,$(LCUDA_CLIENTS)): $(BUILD)/tests/%: tests/clients/%.c tests/clients/common.h $(HDRS) $(BUILD)/sim/libcuda.so.1
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(INCS) -o $@ $< -L$(BUILD)/sim -lcuda -ldl -lpthread

# With the remoting client's integrity hash, to recompute its answer as the
# runtime does.
$(BUILD)/tests/kparamdump: tests/clients/kparamdump.c $(HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(INCS) -o $@ $<

$(BUILD)/tests/cudartclient: tests/clients/cudartclient.c tests/clients/common.h remote/client/integrity.c remote/client/integrity.h remote/client/integrity_devices.h $(HDRS) $(BUILD)/sim/libcuda.so.1
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(INCS) -Iremote/client -o $@ $< remote/client/integrity.c -L$(BUILD)/sim -lcuda -ldl -lpthread

$(BUILD)/tests/nvmlclient $(BUILD)/tests/nvmlprocs: $(BUILD)/tests/%: tests/clients/%.c tests/clients/nvmlcheck.h $(HDRS) $(BUILD)/sim/libnvidia-ml.so.1
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(INCS) -o $@ $< -L$(BUILD)/sim -lnvidia-ml

# Linked with the remoting client's NVML and libcuda, for what only it answers.
$(BUILD)/tests/nvmlremote: tests/clients/nvmlremote.c tests/clients/nvmlcheck.h $(HDRS) $(BUILD)/remote/libnvidia-ml.so.1
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) $(INCS) -o $@ $< -L$(BUILD)/remote -lnvidia-ml -lcuda

# A second interposer preloaded after the shim: its dlsym(RTLD_NEXT) must
# still find the definition after itself.
$(BUILD)/tests/libnextlib.so: tests/clients/nextlib.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(WARN) -fPIC -shared -o $@ $< -ldl

gen-check:
	$(GO) run ./tools/gen -check

# The daemon's API in Go, generated from proto/ by protoc with the plugins
# go.mod pins, and committed: building and CI need no protoc. proto-check
# fails if the committed code is not what proto/ generates; it runs only
# where protoc is installed, and says so where it is not. The protoc version
# line of the generated headers is not compared.
.PHONY: proto proto-check protoc-plugins
PROTO_SRC := $(wildcard proto/flexgv/v1/*.proto)
PROTOC     = PATH=$(abspath $(BUILD))/protoc-plugins:$$PATH protoc -I proto \
             --go_opt=paths=source_relative --go-grpc_opt=paths=source_relative
protoc-plugins:
	GOBIN=$(abspath $(BUILD))/protoc-plugins $(GO) install \
		google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc

proto: protoc-plugins
	$(PROTOC) --go_out=proto --go-grpc_out=proto $(PROTO_SRC)

proto-check:
ifeq ($(shell command -v protoc),)
	@echo "proto-check: skipped, protoc is not installed (apt-get install protobuf-compiler)"
else
	@$(MAKE) --no-print-directory protoc-plugins >/dev/null
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(PROTOC) --go_out=$$tmp --go-grpc_out=$$tmp $(PROTO_SRC) && \
	diff -r -I '^//.*protoc  *v[0-9]' -x '*.proto' proto $$tmp || \
	{ echo "proto-check: the generated code differs from proto/; run make proto" >&2; exit 1; }
endif

# go test -json shown as it runs: a line per test, a package's own
# progress, the whole output of a failure.
TESTPROGRESS := $(BUILD)/tools/testprogress
$(TESTPROGRESS): tools/testprogress/main.go
	@mkdir -p $(@D)
	$(GO) build -o $@ ./tools/testprogress

# The fast tier, for edit-compile-test: the build, unit tests and the
# simulated-GPU tests that take seconds (go test -short: the long ones skip
# themselves with testing.Short()).
.PHONY: check
check: all
	@echo "make check: unit tests and the short simulated-GPU tests (go test -short; make test runs every test)"
	FLEXGV_BUILD=$(CURDIR)/$(BUILD) $(GO) test -short -count=1 -timeout 20m ./...

test: all gen-check proto-check $(TESTPROGRESS)
	@echo "make test 1/4: go vet"
	$(GO) vet ./...
	@echo "make test 2/4: unit tests, every package but tests/e2e"
	FLEXGV_BUILD=$(CURDIR)/$(BUILD) $(GO) test -count=1 -json $$($(GO) list ./... | grep -v '/tests/e2e$$') | $(TESTPROGRESS)
	@echo "make test 3/4: the simulated-GPU tests (tests/e2e, some minutes), a line per test as it ends"
	FLEXGV_BUILD=$(CURDIR)/$(BUILD) $(GO) test -count=1 -timeout 45m -json ./tests/e2e/ | $(TESTPROGRESS)
	@echo "make test 4/4: the Kubernetes tests (make test-k8s)"
	$(MAKE) --no-print-directory test-k8s

# tests/k8s is a module of its own: only it depends on k8s.io/kubernetes.
# Its packages are tested one at a time: go test shows a lone package's
# output as it comes (the control plane's build, the first time, says how
# far it got every 30 s).
.PHONY: test-k8s
test-k8s: all $(TESTPROGRESS)
	@echo "make test-k8s: go vet (compiles the Kubernetes packages the tests use: minutes the first time)"
	cd tests/k8s && $(GO) vet ./...
	@echo "make test-k8s: the Kubernetes tests; the first run builds a control plane from k8s.io/kubernetes (~13 min on 2 cores, cached after)"
	cd tests/k8s && $(GO) test -count=1 -json ./controlplane | $(CURDIR)/$(TESTPROGRESS)
	cd tests/k8s && FLEXGV_BUILD=$(CURDIR)/$(BUILD) $(GO) test -count=1 -json ./image | $(CURDIR)/$(TESTPROGRESS)
	cd tests/k8s && FLEXGV_BUILD=$(CURDIR)/$(BUILD) $(GO) test -count=1 -timeout 30m -json . | $(CURDIR)/$(TESTPROGRESS)

demo: all
	./scripts/demo.sh

clean:
	rm -rf $(BUILD)
