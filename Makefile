# sandq - one GNU Makefile for every binary, library, test and benchmark.
#
#   make                 build build/sandqd, build/sandq-worker, build/sandq
#   make test            install missing Debian packages, build, run every test
#   make demo            run the example jobs against a private redis + sandqd
#   make bench           run the benchmark (prints ratios against the floors)
#   make bench-hosts     throughput over 1, 2 and 3 hosts (network namespaces)
#                        (make bench ends with build/image-bench: jobs on OCI
#                        images, against a private docker-registry)
#   make SANITIZER=address test    (or undefined) build and test with a sanitizer
#   make asan / ubsan    shorthands for the two above
#   make install [PREFIX=/usr/local] [DESTDIR=]   (and make uninstall)
#   make python-test     only the Python client's tests (clients/python), and mypy on it
#   make typescript-test only the TypeScript client's tests (clients/typescript)
#   make dashboard-test  only the web dashboard's tests (tests/dashboard, headless Chromium)
#   make lint            cppcheck over every folder, and the folder rules
#                        of docs/architecture.md (tests/layout_check.py)
#
# Each binary lists its own sources and libraries, so the link lines show the
# privilege split: only sandqd links hiredis and libuv; the worker links
# neither and never talks to the network.

# `make` alone builds everything (rules that come before `all` below,
# such as the generated manual's, must not become the default goal).
.DEFAULT_GOAL := all

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBEXECDIR ?= $(PREFIX)/libexec/sandq
B := build

CC ?= cc
SANITIZER ?=
WERROR ?=
OPT ?= -O2 -g

WARN := -Wall -Wextra -Wstrict-prototypes -Wmissing-prototypes -Wshadow \
	-Wpointer-arith -Wcast-qual -Wformat=2 -Wno-format-nonliteral \
	-Wvla -Wnull-dereference -Wimplicit-fallthrough
HARDEN := -D_FORTIFY_SOURCE=3 -fstack-protector-strong \
	-fstack-clash-protection -fPIE
HARDEN_LD := -pie -Wl,-z,relro,-z,now,-z,noexecstack

CFLAGS_ALL := -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) $(HARDEN) -MMD -MP \
	-DSANDQ_LIBEXECDIR='"$(LIBEXECDIR)"' $(if $(WERROR),-Werror) $(CFLAGS)
LDFLAGS_ALL := $(HARDEN_LD) $(LDFLAGS)

# sd_notify(3) for sandqd's Type=notify unit, with Debian's libsystemd when
# its .pc is there (deploy/install-deps.sh installs libsystemd-dev); without
# it sandqd builds with no-op notifications (dispatcher/notify.h).
HAVE_LIBSYSTEMD := $(shell pkg-config --exists libsystemd 2>/dev/null && echo 1)
ifeq ($(HAVE_LIBSYSTEMD),1)
CFLAGS_ALL += -DHAVE_LIBSYSTEMD
LIBS_SYSTEMD := -lsystemd
endif

ifneq ($(SANITIZER),)
CFLAGS_ALL += -fsanitize=$(SANITIZER) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS_ALL += -fsanitize=$(SANITIZER)
# FORTIFY and ASan disagree about some interceptors.
CFLAGS_ALL := $(filter-out -D_FORTIFY_SOURCE=3,$(CFLAGS_ALL))
endif

# Rebuild everything when the flags change (Redis .make-settings).
SETTINGS := $(B)/.make-settings
SETTINGS_NOW := $(CC) $(CFLAGS_ALL) $(LDFLAGS_ALL)
$(shell mkdir -p $(B) && \
  if [ "$$(cat $(SETTINGS) 2>/dev/null)" != "$(SETTINGS_NOW)" ]; then \
    rm -rf $(B)/obj $(B)/tests $(B)/imgbench; echo "$(SETTINGS_NOW)" > $(SETTINGS); fi)

COMMON_SRCS := common/log.c common/xmalloc.c common/err.c common/msg.c common/util.c
# log_format = json (jansson): in sandqd and its workers only, so that
# libsandq and sandq-unpack keep linking without jansson.
LOG_JSON_SRCS := common/log_json.c
PROTO_SRCS := proto/job.c proto/result.c proto/scan.c proto/pack.c proto/path.c proto/keys.c proto/url.c
# Image references and the image_sources patterns (pure): the config and
# the tenant records check patterns with it, sandqd's intake references.
IMAGES_REF_SRCS := images/ref.c images/names.c
CONFIG_SRCS := config/config.c egress/match.c $(IMAGES_REF_SRCS)
# The SQLite helper of every module that keeps a database (-lsqlite3).
SQL_SRCS := common/sql.c
# The AgentFS codec, its session table, the copy-on-write image and patch.
AGENTFS_SRCS := agentfs/agentfs.c agentfs/agentfs_meta.c agentfs/agentfs_session.c agentfs/cowimg.c agentfs/patch.c
# The local snapshot store; of agentfs/ it needs patch.c alone.
STORE_SRCS := store/store.c store/store_names.c store/store_chunks.c store/store_import.c store/store_migrate.c store/store_sql.c proto/snapkey.c
# Materialise and capture over the codec; perms.c (path rules, with the
# rule levels of proto/path.c) also links alone. ($^ drops a repeated object.)
WORKSPACE_SRCS := workspace/workspace.c workspace/workspace_capture.c workspace/perms.c proto/path.c
# What the worker keeps snapshots with: codec, local store and workspace.
SNAPSHOT_SRCS := $(SQL_SRCS) $(AGENTFS_SRCS) $(STORE_SRCS) $(WORKSPACE_SRCS)
# The Redis snapshot store: hiredis, so never in the worker. sandqd links it
# over the local store (STORE_SRCS), and so does its test.
RSTORE_SRCS := dispatcher/rstore/rstore.c dispatcher/rstore/rstore_blob.c dispatcher/rstore/rstore_lua.c queue/redis_sync.c
# build/sandq-worker runs as four processes, and a file of sandbox/ that
# several of them run names the side in each function (ns_worker_*,
# ns_init_*, job_*):
#   spawner  root, no seccomp filter, only clones inits and mounts image
#            layers: sandbox/spawn.c, layers.c, ipcns.c
#            (spawner_main)
#   worker   the confined worker: worker/*.c, STORE_SRCS, sandbox/sandbox.c,
#            image.c, sockcap.c, and the worker's side of spawn.c, ns.c,
#            cgroup.c and seccomp.c
#   init     pid 1 of the sandbox's namespaces: sandbox/init.c, mount.c,
#            persist.c (with agentfs/ and workspace/), and init's side of
#            ns.c, cgroup.c, seccomp.c and exec.c
#   job      the job's own process until it execs: exec.c's job_* and
#            limits.c
SANDBOX_SRCS := sandbox/sandbox.c sandbox/init.c sandbox/persist.c sandbox/spawn.c sandbox/ns.c sandbox/mount.c sandbox/seccomp.c sandbox/cgroup.c \
	sandbox/limits.c sandbox/exec.c sandbox/warm.c sandbox/image.c sandbox/sockcap.c sandbox/layers.c \
	sandbox/ipcns.c
OPS_SRCS := worker/ops.c worker/ops_common.c worker/ops_fs.c worker/ops_kv.c worker/ops_sandbox.c
WORKER_SRCS := worker/main.c worker/job.c worker/seed.c worker/image.c proto/batchcase.c proto/rx.c $(OPS_SRCS)
# The dispatcher's core (no Redis, no libuv): what its unit tests link.
DISPATCHER_CORE_SRCS := dispatcher/core/intake.c dispatcher/core/runq.c
DISPATCHER_SRCS := dispatcher/main.c dispatcher/pool.c dispatcher/sched.c $(DISPATCHER_CORE_SRCS) \
	dispatcher/jobs.c dispatcher/audit.c dispatcher/tenants.c dispatcher/status.c dispatcher/admit.c dispatcher/lease.c dispatcher/cancel.c dispatcher/shared.c dispatcher/images.c dispatcher/imgnames.c dispatcher/sbximage.c queue/redis.c queue/uvredis.c
# image.pull's answer, pull progress and pulls on the audit trail (issue 16).
DISPATCHER_SRCS += dispatcher/image_pull.c
# Prometheus metrics: the registry and writer, and GET /metrics on libh2o (issue 18).
DISPATCHER_SRCS += dispatcher/metrics.c dispatcher/exporter.c
# The egress proxy's supervision and reports (issue 21).
DISPATCHER_SRCS += dispatcher/egress.c
# Unpacking one image layer (libarchive), in a child process it forks.
IMAGES_UNPACK_SRCS := images/unpack.c images/unpack_tar.c
# The per-host image cache (issue 16): pulls with skopeo, checks every
# blob against its digest, unpacks each layer once (-ljansson -lcrypto).
IMAGES_CACHE_SRCS := images/cache.c images/cache_records.c images/cache_evict.c images/oci.c images/skopeo.c
# What the worker reads of the cache: records, layer folders, an image's
# user (never the pull: no skopeo, no unpacker in the confined worker).
IMAGES_READ_SRCS := images/cache_records.c images/oci.c images/user.c
# Making images without Docker (`sandq image build`, `import`): the packer,
# what a tarball is, the machine's apt sources, mmdebstrap, and skopeo to
# push (-larchive -ljansson -lcrypto).
IMAGES_BUILD_SRCS := images/pack.c images/tarkind.c images/aptsrc.c images/debian.c images/oci.c images/skopeo.c
CLIENT_SRCS := libsandq/libsandq.c libsandq/cases.c libsandq/presets.c libsandq/audit.c proto/snapkey.c
AUDIT_SRCS := audit/event.c audit/db.c audit/queue.c
TENANT_SRCS := queue/tenant.c $(IMAGES_REF_SRCS)
CLI_SRCS := cli/cli.c cli/cli_common.c proto/mpjson.c cli/cli_esc.c cli/cli_man.c cli/cli_sandbox.c cli/cli_fs.c cli/cli_output.c cli/gitignore.c cli/doctor.c sandbox/cgroup.c $(SQL_SRCS) $(AGENTFS_SRCS) $(WORKSPACE_SRCS) \
	cli/cli_audit.c $(AUDIT_SRCS) cli/cli_tenant.c $(TENANT_SRCS) cli/redis_sync.c queue/redis_sync.c cli/cli_status.c queue/status.c cli/cli_dead.c queue/dead.c cli/cancel.c queue/cancel.c \
	cli/cli_batch.c proto/batchcase.c proto/rx.c cli/cli_batch_status.c cli/cli_presets.c
# sandq tenant token add|ls|rm: the HTTP gateway's API tokens (issue 17).
CLI_SRCS += cli/cli_token.c queue/token.c
# sandq mcp: a Model Context Protocol server over stdio (issue 17).
CLI_SRCS += cli/cli_mcp.c proto/mcp.c
# sandq image tag|untag|tags: a tenant's image names, a registry's tag pinned by skopeo.
CLI_SRCS += cli/cli_image_tag.c images/pin.c images/skopeo.c images/oci.c
# `sandq image pull` and `sandq image ls` (issue 16).
CLI_SRCS += cli/cli_image.c
# sandq image build|import (each object once: the line above has some).
CLI_SRCS += cli/cli_image_build.c $(filter-out $(CLI_SRCS),$(IMAGES_BUILD_SRCS))

# The manual pages: docs/man/*.scd is the one source. scdoc makes the roff
# pages make install puts in MANDIR; docs/man/help2c.py renders sandq's
# section 1 pages with mandoc into the C table sandq --help and sandq help
# VERB print (cli/cli_man.c), so the two cannot disagree. @VERSION@ in a
# page is CLI_VERSION.
VERSION := $(shell sed -n 's/^\#define CLI_VERSION "\([^"]*\)".*/\1/p' cli/cli_common.h)
MAN_SCD := $(wildcard docs/man/*.scd)
MAN_PAGES := $(patsubst docs/man/%.scd,$(B)/man/%,$(MAN_SCD))
HELP_PAGES := $(filter $(B)/man/sandq.1 $(B)/man/sandq-%.1,$(MAN_PAGES))
$(B)/man/%: docs/man/%.scd cli/cli_common.h
	@mkdir -p $(dir $@)
	sed 's/@VERSION@/$(VERSION)/g' $< | scdoc > $@.tmp && mv $@.tmp $@
$(B)/gen/cli_man_pages.c: $(HELP_PAGES) docs/man/help2c.py
	@mkdir -p $(dir $@)
	python3 docs/man/help2c.py $@ $(HELP_PAGES)
$(B)/obj/gen/cli_man_pages.o: $(B)/gen/cli_man_pages.c cli/cli_man.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Icli -c -o $@ $<
# sandq.conf(5): made from config/sandq.conf.example, the one documented
# source of every option, by docs/man/conf2scd.py; installed as the others.
MAN_PAGES += $(B)/man/sandq.conf.5
$(B)/gen/sandq.conf.5.scd: config/sandq.conf.example docs/man/conf2scd.py
	@mkdir -p $(dir $@)
	python3 docs/man/conf2scd.py $< $@
$(B)/man/sandq.conf.5: $(B)/gen/sandq.conf.5.scd cli/cli_common.h
	@mkdir -p $(dir $@)
	sed 's/@VERSION@/$(VERSION)/g' $< | scdoc > $@.tmp && mv $@.tmp $@
# The daemons' --help: sandqd(8) and sandq-gateway(8), rendered the same
# way, each one C string (sandqd_man, gateway_man) their main.c prints.
$(B)/gen/sandqd_man.c: $(B)/man/sandqd.8 docs/man/help2c.py
	@mkdir -p $(dir $@)
	python3 docs/man/help2c.py --symbol sandqd_man $@ $<
$(B)/gen/gateway_man.c: $(B)/man/sandq-gateway.8 docs/man/help2c.py
	@mkdir -p $(dir $@)
	python3 docs/man/help2c.py --symbol gateway_man $@ $<
$(B)/obj/gen/%_man.o: $(B)/gen/%_man.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c -o $@ $<

LIBS_DISPATCHER := -lh2o -lwslay -luv -lhiredis -lmsgpackc -linih -ljansson -lsqlite3 -lcrypto -larchive -lpthread -lm $(LIBS_SYSTEMD)
LIBS_WORKER := -lseccomp -lmsgpackc -lsqlite3 -lcrypto -ljansson -lpcre2-8
LIBS_CLIENT := -lhiredis -lmsgpackc -lcrypto
LIBS_CLI := $(LIBS_CLIENT) -ljansson -lcrypto -lsqlite3 -larchive -lpcre2-8

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))

# sandqd reads and writes the local store only for the Redis store's sync (dispatcher/shared.c).
SANDQD_OBJS := $(call obj,$(DISPATCHER_SRCS) $(LOG_JSON_SRCS) $(AUDIT_SRCS) $(TENANT_SRCS) $(RSTORE_SRCS) $(SQL_SRCS) $(STORE_SRCS) agentfs/patch.c sandbox/cgroup.c workspace/perms.c workspace/perms_json.c $(IMAGES_CACHE_SRCS) $(IMAGES_UNPACK_SRCS) $(CONFIG_SRCS) $(PROTO_SRCS) $(COMMON_SRCS))
SANDQD_OBJS += $(B)/obj/gen/sandqd_man.o
WORKER_OBJS := $(call obj,$(WORKER_SRCS) $(LOG_JSON_SRCS) $(SANDBOX_SRCS) $(IMAGES_READ_SRCS) $(SNAPSHOT_SRCS) $(PROTO_SRCS) $(COMMON_SRCS))
LIBSANDQ_OBJS := $(call obj,$(CLIENT_SRCS) $(PROTO_SRCS) $(COMMON_SRCS))
CLI_OBJS := $(call obj,$(CLI_SRCS)) $(B)/obj/gen/cli_man_pages.o

# sandq-gateway (issue 17): HTTP in front of Redis; libh2o on libuv, hiredis.
GATEWAY_SRCS := gateway/main.c gateway/server.c gateway/dashboard.c gateway/call.c gateway/tokcache.c gateway/wake.c gateway/admin.c audit/event.c gateway/stream.c gateway/sandbox.c gateway/tar.c gateway/batch.c proto/batchcase.c proto/rx.c gateway/mcp.c gateway/jobjson.c proto/mpjson.c proto/mcp.c queue/token.c queue/cancel.c queue/status.c queue/dead.c queue/uvredis.c $(PROTO_SRCS) $(COMMON_SRCS)
# --config: sandqd's parser and option table (its [gateway] section).
GATEWAY_SRCS += $(CONFIG_SRCS) queue/tenant.c
LIBS_GATEWAY := -lh2o -lwslay -luv -lhiredis -lmsgpackc -ljansson -lcrypto -linih -larchive -lpcre2-8
# sandq-egress (issue 21): the egress proxy of `net: allow` jobs, started and
# supervised by sandqd; libuv, Debian's http_parser, OpenSSL for the SNI.
EGRESS_SRCS := egress/main.c egress/proxy.c egress/sni.c egress/match.c
LIBS_EGRESS := -luv -lhttp_parser -lssl -lcrypto -lseccomp
BINS := $(B)/sandqd $(B)/sandq-worker $(B)/sandq $(B)/sandq-unpack $(B)/sandq-gateway $(B)/sandq-egress

all: $(BINS) $(B)/libsandq.a $(MAN_PAGES)

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c -o $@ $<

$(B)/sandqd: $(SANDQD_OBJS)
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) $(LIBS_DISPATCHER)

$(B)/sandq-worker: $(WORKER_OBJS)
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) $(LIBS_WORKER)

# sandq-unpack: one image layer unpacked, in a process of its own (images/unpack.c
# starts it with fork and at once execve, for a threaded caller).
$(B)/sandq-unpack: $(call obj,images/unpack_main.c images/unpack_child.c images/unpack_tar.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -larchive

$(B)/sandq-egress: $(call obj,$(EGRESS_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) $(LIBS_EGRESS)

$(B)/sandq-gateway: $(call obj,$(GATEWAY_SRCS)) $(B)/obj/gen/gateway_man.o
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) $(LIBS_GATEWAY)

$(B)/libsandq.a: $(LIBSANDQ_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(B)/sandq: $(CLI_OBJS) $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $(CLI_OBJS) $(B)/libsandq.a $(LDFLAGS_ALL) $(LIBS_CLI)

### Tests ###################################################################

# Unit tests: pure code, no root, no network.
UNIT_TESTS := msg payload config limits seccomp agentfs perms store workspace ops interop gitignore overlay cowimg audit tenant cli_esc sched intake unpack imgref oci imguser pack aptsrc token
# The log line formats: text, journald's priority, json (issue 18).
UNIT_TESTS += log
# sandqd's Prometheus registry and exposition writer (issue 18).
UNIT_TESTS += metrics
# expect regexes on PCRE2, batchcase's regex mode (issue 20).
UNIT_TESTS += rx
# The egress allowlist's host patterns and refused addresses (issue 21).
UNIT_TESTS += egress_match
# Integration tests: real redis-server, real sandqd, real sandboxes.
INTEG_TESTS := e2e containment kmem sandbox cli_sandbox cli_hostile acl fair lease retry batch hygiene rstore hosts shared images images_run imgnames
# Two sandqd hosts, one Redis, one registry: pulls, image ls, image pull (issue 16).
INTEG_TESTS += images_hosts
# Hostile images end to end (issue 16, items 3 and 6).
INTEG_TESTS += images_hostile
# sandq image build and import, against a real build and a private registry.
INTEG_TESTS += imgbuild_cli
# Sandboxes on images (issue 16, item 4).
INTEG_TESTS += images_sandbox
INTEG_TESTS += template
# sandq tenant token add|ls|rm against a private redis-server (issue 17).
INTEG_TESTS += token_cli
# sandqd's health, readiness, reload and logs for operators (issue 18).
INTEG_TESTS += health
# sandq-gateway over HTTP (libcurl) in front of redis-server and sandqd (issue 17).
INTEG_TESTS += gateway
# sandq-gateway's live output (SSE) and cancel route (issue 17).
INTEG_TESTS += gateway_stream
# sandboxes, files and kv over sandq-gateway (issue 17).
INTEG_TESTS += gateway_sandbox
# an admin token's views (status, dead letters, audit) and X-Sandq-Tenant (issue 17).
INTEG_TESTS += gateway_admin
# sandqd's GET /metrics, read plainly and scraped by Debian's prometheus (issue 18).
INTEG_TESTS += metrics_integ
# The rarer events' counters, the streams' gauges and the snapshot store's size (issue 18).
INTEG_TESTS += metrics_events
# sandq-gateway --config ([gateway] of sandq.conf) and max_connections (issue 17).
INTEG_TESTS += gateway_conf
# batches over sandq-gateway: submit, progress, results, cancel (issue 17).
INTEG_TESTS += gateway_batch
# a sandbox's folder as a tar over sandq-gateway (issue 17), archives built with libarchive.
INTEG_TESTS += gateway_tar
# sandqd's scripts as EVALSHA, and every job answered once across a SCRIPT FLUSH (issue 19).
INTEG_TESTS += evalsha
# a python job on the warm interpreter: what a cold start sees, the same confinement (issue 19).
INTEG_TESTS += warm
# a worker's two kept cgroups carry nothing of one job to a later one (cgroup v1)
INTEG_TESTS += cgslot
# a worker's jobs take turns in one network namespace, and leave nothing in it
INTEG_TESTS += netns
# what a worker reuses across jobs (a cgroup slot's memory, the root's mount template) carries nothing (issue 19)
INTEG_TESTS += reuse
# what a job's process starts with, now that fewer of its steps run per job (issue 19)
INTEG_TESTS += jobstart
# path presets enforced by a real sandqd, and the list it publishes (issue 20)
INTEG_TESTS += presets_integ
# libsandq's runs with cases, path presets and audit trail (issue 20)
INTEG_TESTS += libsandq_api
# sandq-egress against local servers, each job a shell in a namespace of its own (issue 21)
INTEG_TESTS += egress
# net "allow" jobs end to end: sandqd, its proxy, a local web server (issue 21)
INTEG_TESTS += egress_job
TEST_BINS := $(patsubst %,$(B)/tests/%_test,$(UNIT_TESTS) $(INTEG_TESTS))
# The Python client's tests (clients/python/tests: unittest against a private
# redis-server and sandqd), behind a wrapper tests/run.sh can run like a binary.
TEST_BINS += $(B)/tests/python_test
# mypy --strict on the Python client's package (Debian's python3-mypy; the
# settings are clients/python/pyproject.toml's [tool.mypy]), a wrapper likewise.
TEST_BINS += $(B)/tests/python_mypy_test
# The TypeScript client's tests (clients/typescript/test: node --test against
# a private redis-server, sandqd and sandq-gateway, and npm pack), behind a
# wrapper like python_test's.
TEST_BINS += $(B)/tests/typescript_test
# sandq mcp (stdio, mcp.test.mjs) and sandq-gateway's POST /v1/mcp (streamable
# HTTP, http.test.mjs) driven by the official MCP TypeScript SDK's client
# (tests/mcp: node --test against a private redis-server, sandqd and
# sandq-gateway), a wrapper likewise.
TEST_BINS += $(B)/tests/mcp_test
# The web dashboard (gateway/dashboard) in Debian's headless Chromium driven
# by puppeteer-core (tests/dashboard: node --test against a private
# redis-server, sandqd and sandq-gateway), a wrapper likewise.
TEST_BINS += $(B)/tests/dashboard_test
# The folder rules of docs/architecture.md (tests/layout_check.py).
TEST_BINS += $(B)/tests/layout_test
# make install and make uninstall into a scratch DESTDIR (tests/install_test.sh).
TEST_BINS += $(B)/tests/install_test

$(B)/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Wno-missing-prototypes -c -o $@ $<

$(B)/tests/egress_match_test: $(B)/tests/egress_match_test.o $(call obj,egress/match.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion
$(B)/tests/msg_test: $(B)/tests/msg_test.o $(call obj,$(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion
$(B)/tests/payload_test: $(B)/tests/payload_test.o $(call obj,$(PROTO_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lmsgpackc
$(B)/tests/config_test: $(B)/tests/config_test.o $(call obj,$(CONFIG_SRCS) $(TENANT_SRCS) $(PROTO_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lmsgpackc -linih -ljansson
$(B)/tests/limits_test: $(B)/tests/limits_test.o $(call obj,sandbox/limits.c $(PROTO_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lmsgpackc
$(B)/tests/seccomp_test: $(B)/tests/seccomp_test.o $(call obj,sandbox/seccomp.c sandbox/sockcap.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lseccomp
$(B)/tests/agentfs_test: $(B)/tests/agentfs_test.o $(call obj,$(SQL_SRCS) $(AGENTFS_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lsqlite3 -lcrypto -ljansson
$(B)/tests/perms_test: $(B)/tests/perms_test.o $(call obj,workspace/perms.c proto/path.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion
$(B)/tests/store_test: $(B)/tests/store_test.o $(call obj,$(SQL_SRCS) $(STORE_SRCS) agentfs/patch.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lsqlite3 -lcrypto -ljansson
$(B)/tests/workspace_test: $(B)/tests/workspace_test.o $(call obj,$(WORKSPACE_SRCS) $(SQL_SRCS) $(AGENTFS_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lsqlite3 -lcrypto -ljansson
$(B)/tests/overlay_test: $(B)/tests/overlay_test.o $(call obj,$(WORKSPACE_SRCS) $(SQL_SRCS) $(AGENTFS_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lsqlite3 -lcrypto -ljansson
$(B)/tests/cowimg_test: $(B)/tests/cowimg_test.o $(call obj,agentfs/cowimg.c agentfs/patch.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lsqlite3
# audit_test runs build/sandq (--db, and a private redis-server for the stream).
$(B)/tests/audit_test: $(B)/tests/audit_test.o $(B)/tests/harness.o $(call obj,$(AUDIT_SRCS) $(SQL_SRCS)) $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lsqlite3 -ljansson $(LIBS_CLIENT) -lcrypto -lpthread
$(B)/tests/gitignore_test: $(B)/tests/gitignore_test.o $(call obj,cli/gitignore.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion
$(B)/tests/ops_test: $(B)/tests/ops_test.o $(call obj,$(OPS_SRCS) $(SNAPSHOT_SRCS) $(PROTO_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lsqlite3 -lcrypto -ljansson -lmsgpackc
$(B)/tests/interop_test: $(B)/tests/interop_test.o $(call obj,$(SQL_SRCS) $(AGENTFS_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lsqlite3 -lcrypto -ljansson
$(B)/tests/e2e_test: $(B)/tests/e2e_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/sandbox_test: $(B)/tests/sandbox_test.o $(B)/tests/harness.o $(call obj,workspace/perms.c) $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/template_test: $(B)/tests/template_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT)
$(B)/tests/containment_test: $(B)/tests/containment_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/warm_test: $(B)/tests/warm_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/kmem_test: $(B)/tests/kmem_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/cgslot_test: $(B)/tests/cgslot_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/egress_test: $(B)/tests/egress_test.o $(B)/tests/harness.o $(B)/libsandq.a $(B)/sandq-egress
	$(CC) $(CFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/egress_job_test: $(B)/tests/egress_job_test.o $(B)/tests/harness.o $(B)/libsandq.a $(B)/sandq-egress
	$(CC) $(CFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/netns_test: $(B)/tests/netns_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/reuse_test: $(B)/tests/reuse_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/jobstart_test: $(B)/tests/jobstart_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/rx_test: $(B)/tests/rx_test.o $(call obj,proto/rx.c proto/batchcase.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson -lmsgpackc -lpcre2-8
$(B)/tests/libsandq_api_test: $(B)/tests/libsandq_api_test.o $(B)/tests/harness.o $(call obj,workspace/perms.c proto/path.c proto/batchcase.c proto/rx.c $(COMMON_SRCS)) $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto -ljansson -lpcre2-8
$(B)/tests/presets_integ_test: $(B)/tests/presets_integ_test.o $(B)/tests/harness.o $(call obj,workspace/perms.c proto/path.c $(COMMON_SRCS)) $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto -ljansson
$(B)/tests/cli_sandbox_test: $(B)/tests/cli_sandbox_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto -ljansson -lsqlite3
$(B)/tests/log_test: $(B)/tests/log_test.o $(call obj,$(LOG_JSON_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson
$(B)/tests/cli_esc_test: $(B)/tests/cli_esc_test.o $(call obj,cli/cli_esc.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion
# cli_hostile_test runs build/sandq against the harness, and answers some of
# its ops itself as a hostile server would (msgpack results it encodes).
$(B)/tests/cli_hostile_test: $(B)/tests/cli_hostile_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto -ljansson
$(B)/tests/tenant_test: $(B)/tests/tenant_test.o $(call obj,$(TENANT_SRCS) $(PROTO_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lmsgpackc -ljansson
# sched_test: the scheduler's pick against a fake pool (dispatcher/core/runq.c alone).
$(B)/tests/sched_test: $(B)/tests/sched_test.o $(call obj,dispatcher/core/runq.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion
# metrics_test: the exposition text of dispatcher/metrics.c (pure).
$(B)/tests/metrics_test: $(B)/tests/metrics_test.o $(call obj,dispatcher/metrics.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lm
# metrics_integ_test: sandqd's /metrics over libcurl, and a prometheus child's queries.
$(B)/tests/metrics_integ_test: $(B)/tests/metrics_integ_test.o $(B)/tests/harness.o $(B)/libsandq.a | $(B)/sandqd $(B)/sandq-worker
	$(CC) $(CFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(LDFLAGS_ALL) -lcriterion -lcurl -ljansson $(LIBS_CLIENT) -lcrypto
# metrics_events_test: retries, dead letters, takeovers, recycling, stream and store gauges.
$(B)/tests/metrics_events_test: $(B)/tests/metrics_events_test.o $(B)/tests/harness.o $(B)/libsandq.a | $(B)/sandqd $(B)/sandq-worker
	$(CC) $(CFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(LDFLAGS_ALL) -lcriterion -lcurl $(LIBS_CLIENT) -lcrypto
# intake_test: what a stream entry becomes (dispatcher/core/intake.c, the config and tenant rules).
$(B)/tests/intake_test: $(B)/tests/intake_test.o $(call obj,dispatcher/core/intake.c workspace/perms.c $(CONFIG_SRCS) $(TENANT_SRCS) $(PROTO_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -lmsgpackc -linih -ljansson
# unpack_test: layers it writes with libarchive, unpacked in a mkdtemp folder;
# libseccomp refuses mknod to one test, for the whiteout's fallback form.
$(B)/tests/unpack_test: $(B)/tests/unpack_test.o $(call obj,$(IMAGES_UNPACK_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -larchive -lseccomp
# imgref_test: image references and image_sources patterns (images/ref.c alone).
$(B)/tests/imgref_test: $(B)/tests/imgref_test.o $(call obj,$(IMAGES_REF_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson
# gateway_test: build/sandq-gateway against the harness, through libcurl;
# tokens are written into Redis with queue/token.c.
$(B)/tests/gateway_test: $(B)/tests/gateway_test.o $(B)/tests/harness.o $(B)/tests/gwharness.o $(call obj,queue/token.c) $(B)/libsandq.a | $(B)/sandq-gateway
	$(CC) $(CFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(LDFLAGS_ALL) -lcriterion -lcurl -ljansson $(LIBS_CLIENT) -lcrypto -lpthread
# gateway_stream_test: the gateway's events and cancel routes, like gateway_test.
$(B)/tests/gateway_stream_test: $(B)/tests/gateway_stream_test.o $(B)/tests/harness.o $(B)/tests/gwharness.o $(call obj,queue/token.c) $(B)/libsandq.a | $(B)/sandq-gateway
	$(CC) $(CFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(LDFLAGS_ALL) -lcriterion -lcurl -ljansson $(LIBS_CLIENT) -lcrypto -lpthread
# gateway_sandbox_test: the gateway's sandbox ops and routes, like gateway_test.
$(B)/tests/gateway_sandbox_test: $(B)/tests/gateway_sandbox_test.o $(B)/tests/harness.o $(B)/tests/gwharness.o $(call obj,queue/token.c) $(B)/libsandq.a | $(B)/sandq-gateway
	$(CC) $(CFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(LDFLAGS_ALL) -lcriterion -lcurl -ljansson $(LIBS_CLIENT) -lcrypto -lpthread
# gateway_admin_test: an admin token's views and X-Sandq-Tenant, like
# gateway_test; dead letters' payloads encoded with gateway/jobjson.c.
$(B)/tests/gateway_admin_test: $(B)/tests/gateway_admin_test.o $(B)/tests/harness.o $(B)/tests/gwharness.o $(call obj,queue/token.c gateway/jobjson.c proto/mpjson.c) $(B)/libsandq.a | $(B)/sandq-gateway
	$(CC) $(CFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(LDFLAGS_ALL) -lcriterion -lcurl -ljansson $(LIBS_CLIENT) -lcrypto -lpthread
# gateway_conf_test: the gateway's --config, against redis-server alone.
$(B)/tests/gateway_conf_test: $(B)/tests/gateway_conf_test.o $(B)/tests/harness.o $(B)/tests/gwharness.o $(call obj,queue/token.c) $(B)/libsandq.a | $(B)/sandq-gateway
	$(CC) $(CFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(LDFLAGS_ALL) -lcriterion -lcurl -ljansson $(LIBS_CLIENT) -lcrypto -lpthread

# gateway_batch_test: the gateway's /v1/batches routes, like gateway_test.
$(B)/tests/gateway_batch_test: $(B)/tests/gateway_batch_test.o $(B)/tests/harness.o $(B)/tests/gwharness.o $(call obj,queue/token.c) $(B)/libsandq.a | $(B)/sandq-gateway
	$(CC) $(CFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(LDFLAGS_ALL) -lcriterion -lcurl -ljansson $(LIBS_CLIENT) -lcrypto -lpthread
# gateway_tar_test: the gateway's tar routes, like gateway_test; archives by libarchive.
$(B)/tests/gateway_tar_test: $(B)/tests/gateway_tar_test.o $(B)/tests/harness.o $(B)/tests/gwharness.o $(call obj,queue/token.c) $(B)/libsandq.a | $(B)/sandq-gateway
	$(CC) $(CFLAGS_ALL) -o $@ $(filter %.o %.a,$^) $(LDFLAGS_ALL) -lcriterion -lcurl -ljansson -larchive $(LIBS_CLIENT) -lcrypto -lpthread
# token_test: API tokens of the gateway (queue/token.c alone).
$(B)/tests/token_test: $(B)/tests/token_test.o $(call obj,queue/token.c proto/keys.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson -lcrypto
# health_test: sandq status's exit and schema, sd_notify, SIGHUP, json logs.
$(B)/tests/health_test: $(B)/tests/health_test.o $(B)/tests/harness.o $(call obj,$(COMMON_SRCS)) $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto -ljansson
# token_cli_test runs build/sandq against a private redis-server (no sandqd).
$(B)/tests/token_cli_test: $(B)/tests/token_cli_test.o $(B)/tests/harness.o $(call obj,queue/token.c proto/keys.c $(COMMON_SRCS)) $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto -ljansson
$(B)/tests/acl_test: $(B)/tests/acl_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto -ljansson
$(B)/tests/fair_test: $(B)/tests/fair_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/lease_test: $(B)/tests/lease_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/shared_test: $(B)/tests/shared_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/evalsha_test: $(B)/tests/evalsha_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
$(B)/tests/retry_test: $(B)/tests/retry_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto -ljansson
# batch_test runs build/sandq batch against the harness (and reads its JSON).
$(B)/tests/batch_test: $(B)/tests/batch_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto -ljansson
$(B)/tests/hygiene_test: $(B)/tests/hygiene_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lsqlite3 -lcrypto
# rstore_test: a private redis-server (harness.c) and local stores in a mkdtemp folder.
$(B)/tests/rstore_test: $(B)/tests/rstore_test.o $(B)/tests/harness.o $(call obj,$(RSTORE_SRCS) $(SQL_SRCS) $(STORE_SRCS) agentfs/patch.c $(PROTO_SRCS) $(COMMON_SRCS)) $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lsqlite3 -lcrypto -ljansson
# hosts_test runs deploy/hosts.sh (network namespaces): root, from the repository root.
$(B)/tests/hosts_test: $(B)/tests/hosts_test.o $(B)/tests/harness.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion $(LIBS_CLIENT) -lcrypto
# images_run_test: jobs on images end to end: redis-server, sandqd and a
# private docker-registry (harness.c), busybox images made by hand.
$(B)/tests/images_run_test: $(B)/tests/images_run_test.o $(B)/tests/harness.o $(B)/tests/imgbuild.o \
		$(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson -lcrypto -larchive $(LIBS_CLIENT)
# images_sandbox_test: sandboxes on images (sandbox.create --image
# --from-image-dir), end to end, as images_run_test.
$(B)/tests/images_sandbox_test: $(B)/tests/images_sandbox_test.o $(B)/tests/harness.o \
		$(B)/tests/imgbuild.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson -lcrypto -larchive $(LIBS_CLIENT)
# images_hostile_test: hostile images end to end: redis-server, sandqd and a
# private docker-registry (harness.c), each hostile layer written by hand.
$(B)/tests/images_hostile_test: $(B)/tests/images_hostile_test.o $(B)/tests/harness.o \
		$(B)/tests/imgbuild.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson -lcrypto -larchive $(LIBS_CLIENT)
# images_hosts_test: two sandqd hosts (harness.c) on one registry; reads the
# audit stream with hiredis and the CLI's JSON with jansson.
$(B)/tests/images_hosts_test: $(B)/tests/images_hosts_test.o $(B)/tests/harness.o \
		$(B)/tests/imgbuild.o $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson -lcrypto -larchive $(LIBS_CLIENT)
# imgbuild_cli_test: sandq image build (mmdebstrap from the machine's apt
# sources) and import, pushed to a private docker-registry, run by sandqd.
$(B)/tests/imgbuild_cli_test: $(B)/tests/imgbuild_cli_test.o $(B)/tests/harness.o $(B)/tests/imgbuild.o \
		$(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson -lcrypto -larchive $(LIBS_CLIENT)
# imgnames_test: a tenant's image names (sandq image tag), against a private registry.
$(B)/tests/imgnames_test: $(B)/tests/imgnames_test.o $(B)/tests/harness.o $(B)/tests/imgbuild.o \
		$(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson -lcrypto -larchive $(LIBS_CLIENT)
# imguser_test: an image's User as ids (images/user.c), on folders it makes.
$(B)/tests/imguser_test: $(B)/tests/imguser_test.o $(call obj,images/user.c images/oci.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson
# pack_test: the image packer and the tarball sorter, on tarballs it writes
# with libarchive; skopeo reads what it packs (no network).
$(B)/tests/pack_test: $(B)/tests/pack_test.o $(call obj,images/pack.c images/tarkind.c images/oci.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -larchive -lcrypto -ljansson
# aptsrc_test: apt's sources parsed and written for a suite, the machine's
# read from a test's folder, and package names (no network, no mmdebstrap).
$(B)/tests/aptsrc_test: $(B)/tests/aptsrc_test.o $(call obj,images/aptsrc.c images/debian.c images/oci.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson
# oci_test: the image documents' parsers (images/oci.c) alone.
$(B)/tests/oci_test: $(B)/tests/oci_test.o $(call obj,images/oci.c $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson
# images_test: a private docker-registry (harness.c), images made by hand
# (tests/imgbuild.c, libarchive's writer) and pulled into a cache with skopeo.
$(B)/tests/images_test: $(B)/tests/images_test.o $(B)/tests/harness.o $(B)/tests/imgbuild.o \
		$(call obj,$(IMAGES_CACHE_SRCS) $(IMAGES_UNPACK_SRCS) $(COMMON_SRCS)) $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $^ $(LDFLAGS_ALL) -lcriterion -ljansson -lcrypto -larchive $(LIBS_CLIENT)

# tests/run.sh passes --jobs=N --short-filename, which unittest does not take:
# the wrapper drops them. It runs from the repository root, as run.sh does,
# and SANDQ_BUILD (set by test-run) names the sandqd under test.
$(B)/tests/python_test: Makefile
	@mkdir -p $(dir $@)
	@printf '%s\n' '#!/bin/sh' \
	  '# Made by the Makefile: the Python client tests (clients/python/tests).' \
	  'PYTHONPATH=clients/python PYTHONDONTWRITEBYTECODE=1 exec /usr/bin/python3 -m unittest discover -s clients/python/tests -t clients/python' \
	  > $@.tmp
	@chmod 0755 $@.tmp && mv $@.tmp $@

# mypy's cache goes to /dev/null: nothing is written into the source tree.
$(B)/tests/python_mypy_test: Makefile
	@mkdir -p $(dir $@)
	@printf '%s\n' '#!/bin/sh' \
	  '# Made by the Makefile: mypy --strict on the Python client (clients/python).' \
	  'cd clients/python && PYTHONDONTWRITEBYTECODE=1 exec /usr/bin/python3 -m mypy --config-file pyproject.toml --cache-dir=/dev/null' \
	  > $@.tmp
	@chmod 0755 $@.tmp && mv $@.tmp $@

# The TypeScript client compiled: src/*.ts to dist/*.js and *.d.ts by the
# pinned compiler in its node_modules (deploy/install-node-deps.sh installs
# it; never a global tsc). dist/ is remade whole so a removed source leaves
# nothing behind; a type error fails the build.
TS_DIR := clients/typescript
$(TS_DIR)/dist/index.js: $(wildcard $(TS_DIR)/src/*.ts) $(TS_DIR)/tsconfig.json \
		$(TS_DIR)/package.json $(TS_DIR)/package-lock.json
	@sh deploy/install-node-deps.sh
	@rm -rf $(TS_DIR)/dist
	$(TS_DIR)/node_modules/.bin/tsc -p $(TS_DIR)

# tests/run.sh's --jobs=N --short-filename are dropped, as python_test's.
# websocket.test.mjs needs globalThis.WebSocket: Node 20 has it only with
# --experimental-websocket (22 and later by default).
$(B)/tests/typescript_test: Makefile $(TS_DIR)/dist/index.js
	@mkdir -p $(dir $@)
	@printf '%s\n' '#!/bin/sh' \
	  '# Made by the Makefile: the TypeScript client tests (clients/typescript/test).' \
	  'ws=' \
	  'node -e "typeof WebSocket === \"function\" || process.exit(1)" || ws=--experimental-websocket' \
	  'exec node $$ws --test clients/typescript/test/*.test.mjs' \
	  > $@.tmp
	@chmod 0755 $@.tmp && mv $@.tmp $@

# The MCP SDK comes from tests/mcp's lockfile (deploy/install-node-deps.sh).
$(B)/tests/mcp_test: Makefile tests/mcp/package.json tests/mcp/package-lock.json
	@sh deploy/install-node-deps.sh
	@mkdir -p $(dir $@)
	@printf '%s\n' '#!/bin/sh' \
	  '# Made by the Makefile: sandq mcp and /v1/mcp against the MCP SDK client (tests/mcp).' \
	  'exec node --test tests/mcp/*.test.mjs' \
	  > $@.tmp
	@chmod 0755 $@.tmp && mv $@.tmp $@

# puppeteer-core comes from tests/dashboard's lockfile; the browser is
# Debian's chromium (deploy/install-deps.sh).
$(B)/tests/dashboard_test: Makefile tests/dashboard/package.json tests/dashboard/package-lock.json
	@sh deploy/install-node-deps.sh
	@mkdir -p $(dir $@)
	@printf '%s\n' '#!/bin/sh' \
	  '# Made by the Makefile: the web dashboard in headless Chromium (tests/dashboard).' \
	  'exec node --test tests/dashboard/*.test.mjs' \
	  > $@.tmp
	@chmod 0755 $@.tmp && mv $@.tmp $@

$(B)/tests/layout_test: Makefile
	@mkdir -p $(dir $@)
	@printf '%s\n' '#!/bin/sh' \
	  '# Made by the Makefile: the folder rules of docs/architecture.md.' \
	  'PYTHONDONTWRITEBYTECODE=1 exec /usr/bin/python3 tests/layout_check.py' \
	  > $@.tmp
	@chmod 0755 $@.tmp && mv $@.tmp $@

# tests/run.sh's --jobs=N --short-filename are dropped, as python_test's.
$(B)/tests/install_test: Makefile
	@mkdir -p $(dir $@)
	@printf '%s\n' '#!/bin/sh' \
	  '# Made by the Makefile: make install and uninstall, checked (tests/install_test.sh).' \
	  'exec sh tests/install_test.sh' \
	  > $@.tmp
	@chmod 0755 $@.tmp && mv $@.tmp $@

deps:
	@sh deploy/install-deps.sh

# `make test` installs what is missing first, then builds with its own make
# so the build sees the freshly installed headers.
test: deps
	@$(MAKE) --no-print-directory test-run

test-run: all $(TEST_BINS)
	@SANDQ_BUILD=$(B) sh tests/run.sh $(TEST_BINS)

python-test: all $(B)/tests/python_test $(B)/tests/python_mypy_test
	@SANDQ_BUILD=$(B) sh tests/run.sh $(B)/tests/python_test $(B)/tests/python_mypy_test

typescript-test: all $(B)/tests/typescript_test
	@SANDQ_BUILD=$(B) sh tests/run.sh $(B)/tests/typescript_test

mcp-test: all $(B)/tests/mcp_test
	@SANDQ_BUILD=$(B) sh tests/run.sh $(B)/tests/mcp_test

dashboard-test: all $(B)/tests/dashboard_test
	@SANDQ_BUILD=$(B) sh tests/run.sh $(B)/tests/dashboard_test

check: test
asan:
	$(MAKE) SANITIZER=address test
ubsan:
	$(MAKE) SANITIZER=undefined test

demo: deps
	@$(MAKE) --no-print-directory all
	@sh deploy/demo.sh

bench: deps
	@$(MAKE) --no-print-directory all $(B)/bench $(B)/snapshot-bench $(B)/sandbox-bench \
		$(B)/image-bench $(B)/gateway-bench $(B)/memory-bench
	@sh bench/run.sh
	@$(B)/snapshot-bench

$(B)/snapshot-bench: bench/snapshot.c bench/timing.h $(call obj,$(SNAPSHOT_SRCS) $(COMMON_SRCS))
	$(CC) $(CFLAGS_ALL) -o $@ $(filter-out %.h,$^) $(LDFLAGS_ALL) -lsqlite3 -lcrypto -ljansson -lm

$(B)/bench: bench/bench.c bench/timing.h $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ bench/bench.c $(B)/libsandq.a $(LDFLAGS_ALL) $(LIBS_CLIENT) -lpthread -lm

# Throughput of one batch over 1, 2 and 3 hosts in network namespaces
# (deploy/hosts.sh; needs root). Not part of make test.
bench-hosts: deps
	@$(MAKE) --no-print-directory all $(B)/hosts-load
	@SANDQ_BUILD=$(B) sh bench/hosts.sh

$(B)/hosts-load: bench/hosts_load.c bench/timing.h $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ bench/hosts_load.c $(B)/libsandq.a $(LDFLAGS_ALL) $(LIBS_CLIENT) -lpthread -lm

# image-bench: jobs on OCI images against their floors. It starts its own
# docker-registry, redis-server and sandqd with tests/harness.c and writes
# its images with tests/imgbuild.c, both compiled against
# bench/shim/criterion/criterion.h (an assert that fails exits 1) instead
# of Criterion.
$(B)/imgbench/%.o: tests/%.c bench/shim/criterion/criterion.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Ibench/shim -Wno-missing-prototypes -c -o $@ $<

$(B)/image-bench: bench/images.c bench/timing.h $(B)/imgbench/harness.o $(B)/imgbench/imgbuild.o \
		$(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ $(filter-out %.h,$^) $(LDFLAGS_ALL) -ljansson -lcrypto -larchive \
		$(LIBS_CLIENT) -lm

# gateway-bench: sandq-gateway beside the Redis path (bench/run.sh runs it
# on its stack; it starts its own gateways and writes its token with queue/token.c).
$(B)/gateway-bench: bench/gateway.c bench/timing.h $(call obj,queue/token.c) $(B)/libsandq.a | $(B)/sandq-gateway
	$(CC) $(CFLAGS_ALL) -o $@ $(filter-out %.h,$^) $(LDFLAGS_ALL) $(LIBS_CLIENT) -lcurl -ljansson -lcrypto -lm

$(B)/sandbox-bench: bench/sandbox.c bench/timing.h $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ bench/sandbox.c $(B)/libsandq.a $(LDFLAGS_ALL) $(LIBS_CLIENT) -lm

# memory-bench: resident memory of sandqd and its workers and Redis's memory
# per job (bench/run.sh runs it on a fresh stack of its own).
$(B)/memory-bench: bench/memory.c bench/timing.h $(B)/libsandq.a
	$(CC) $(CFLAGS_ALL) -o $@ bench/memory.c $(B)/libsandq.a $(LDFLAGS_ALL) $(LIBS_CLIENT) -lpthread -lm

### Installing ##############################################################

# make install [PREFIX=/usr/local] [DESTDIR=]: what a user runs in bin, the
# daemons in sbin, the worker and the unpacker in libexec (sandqd starts
# SANDQ_LIBEXECDIR/sandq-worker, compiled in from LIBEXECDIR above, so
# PREFIX must be the same at build and install: `make install` rebuilds
# when it changes, through .make-settings), the config example, the systemd
# units of deploy/ (every deploy/*.service, /usr/local/bin in them made
# BINDIR/SBINDIR), the man pages, bash completion, and libsandq with its
# header and pkg-config file, the tmpfiles.d entry, and the gateway's web
# dashboard in DATADIR/sandq/dashboard. With PREFIX=/usr the config goes to /etc
# (the FHS); otherwise under PREFIX. `make uninstall` removes exactly the
# files INSTALLED_FILES lists and the folders of sandq's own.
SBINDIR ?= $(PREFIX)/sbin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR ?= $(LIBDIR)/systemd/system
COMPLETIONDIR ?= $(DATADIR)/bash-completion/completions
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
UNITS := $(wildcard deploy/*.service)
TMPFILESDIR ?= $(LIBDIR)/tmpfiles.d
DASHBOARD_FILES := $(wildcard gateway/dashboard/*.html gateway/dashboard/*.css gateway/dashboard/*.js)

# libsandq's pkg-config file, for the PREFIX installed to. The library is
# static, so its own libraries are in Libs.
$(B)/sandq.pc: Makefile cli/cli_common.h
	@printf '%s\n' 'prefix=$(PREFIX)' 'includedir=$(INCLUDEDIR)' 'libdir=$(LIBDIR)' '' \
	  'Name: sandq' 'Description: client library of sandq: jobs and sandboxes over Redis' \
	  'Version: $(VERSION)' 'Cflags: -I$${includedir}' \
	  'Libs: -L$${libdir} -lsandq -lhiredis -lmsgpackc -ljansson -lcrypto' > $@.tmp && mv $@.tmp $@

INSTALLED_FILES := $(BINDIR)/sandq $(BINDIR)/sandq-gateway $(SBINDIR)/sandqd \
	$(LIBEXECDIR)/sandq-worker $(LIBEXECDIR)/sandq-unpack $(LIBEXECDIR)/sandq-egress \
	$(SYSCONFDIR)/sandq/sandq.conf.example \
	$(patsubst deploy/%,$(UNITDIR)/%,$(UNITS)) \
	$(COMPLETIONDIR)/sandq \
	$(foreach m,$(MAN_PAGES),$(MANDIR)/man$(subst .,,$(suffix $(m)))/$(notdir $(m))) \
	$(INCLUDEDIR)/sandq.h $(LIBDIR)/libsandq.a $(PKGCONFIGDIR)/sandq.pc \
	$(TMPFILESDIR)/sandq.conf \
	$(patsubst gateway/dashboard/%,$(DATADIR)/sandq/dashboard/%,$(DASHBOARD_FILES))
# Folders that are sandq's alone, removed when empty (deepest first).
INSTALLED_DIRS := $(LIBEXECDIR) $(SYSCONFDIR)/sandq $(DATADIR)/sandq/dashboard $(DATADIR)/sandq

install: all $(B)/sandq.pc
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) $(DESTDIR)$(LIBEXECDIR) \
		$(DESTDIR)$(SYSCONFDIR)/sandq $(DESTDIR)$(UNITDIR) $(DESTDIR)$(COMPLETIONDIR) \
		$(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 0755 $(B)/sandq $(B)/sandq-gateway $(DESTDIR)$(BINDIR)/
	install -m 0755 $(B)/sandqd $(DESTDIR)$(SBINDIR)/
	install -m 0755 $(B)/sandq-worker $(B)/sandq-unpack $(B)/sandq-egress $(DESTDIR)$(LIBEXECDIR)/
	install -m 0644 config/sandq.conf.example $(DESTDIR)$(SYSCONFDIR)/sandq/
	for u in $(UNITS); do \
		sed -e 's,/usr/local/bin/sandqd,$(SBINDIR)/sandqd,g' -e 's,/usr/local/sbin,$(SBINDIR),g' -e 's,/usr/local/bin,$(BINDIR),g' \
		    -e 's,/usr/local/share,$(DATADIR),g' -e 's,/etc/sandq,$(SYSCONFDIR)/sandq,g' \
		    "$$u" > $(DESTDIR)$(UNITDIR)/$${u#deploy/}.tmp && \
		chmod 0644 $(DESTDIR)$(UNITDIR)/$${u#deploy/}.tmp && \
		mv $(DESTDIR)$(UNITDIR)/$${u#deploy/}.tmp $(DESTDIR)$(UNITDIR)/$${u#deploy/} || exit 1; \
	done
	install -m 0644 deploy/sandq.bash-completion $(DESTDIR)$(COMPLETIONDIR)/sandq
	for m in $(MAN_PAGES); do \
		d=$(DESTDIR)$(MANDIR)/man$${m##*.}; \
		install -d $$d && install -m 0644 $$m $$d/ || exit 1; \
	done
	install -m 0644 libsandq/sandq.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 0644 $(B)/libsandq.a $(DESTDIR)$(LIBDIR)/
	install -m 0644 $(B)/sandq.pc $(DESTDIR)$(PKGCONFIGDIR)/
	install -d $(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(DATADIR)/sandq/dashboard
	install -m 0644 deploy/sandq.tmpfiles $(DESTDIR)$(TMPFILESDIR)/sandq.conf
	install -m 0644 $(DASHBOARD_FILES) $(DESTDIR)$(DATADIR)/sandq/dashboard/

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED_FILES))
	-rmdir $(addprefix $(DESTDIR),$(INSTALLED_DIRS)) 2>/dev/null

# Every source folder, and the folder rules of docs/architecture.md.
# cppcheck reads sandq's code only (no system headers): tests/cppcheck.h
# gives it the iteration macros it would otherwise stop at.
LINT_DIRS := common proto config queue dispatcher worker sandbox agentfs store workspace audit images libsandq cli
lint:
	@SANDQ_EXTRA_PKGS=cppcheck sh deploy/install-deps.sh
	cppcheck --quiet --inline-suppr --enable=warning,portability --std=c11 \
		--error-exitcode=1 --include=tests/cppcheck.h -I. $(LINT_DIRS)
	python3 tests/layout_check.py

clean:
	rm -rf $(B) $(TS_DIR)/dist

.PHONY: all deps test test-run python-test typescript-test mcp-test dashboard-test check asan ubsan demo bench bench-hosts install uninstall lint clean

-include $(shell find $(B) -name '*.d' 2>/dev/null)
