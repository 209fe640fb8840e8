# distlock/Makefile

EXTENSION = distlock
MODULE_big = distlock
OBJS = \
	src/access.o \
	src/admin.o \
	src/advisory.o \
	src/beat.o \
	src/catalog.o \
	src/check.o \
	src/distlock.o \
	src/exec.o \
	src/grants.o \
	src/lease.o \
	src/limits.o \
	src/maintain.o \
	src/position.o \
	src/queue.o \
	src/roleref.o \
	src/session.o \
	src/shmem.o \
	src/tables.o \
	src/throttle.o \
	src/token.o \
	src/views.o \
	src/wait.o \
	src/wake.o \
	src/worker.o
DATA = $(wildcard sql/distlock--*.sql)
PGFILEDESC = "distlock - lease locks, worker sessions and a job queue"

# Regression tests (test/sql, expected/), in a deliberate order.
REGRESS = \
	install \
	lease \
	session \
	lease_session \
	queue \
	queue_retry \
	bad_input \
	clock \
	roles \
	queues \
	admin \
	limits \
	audit \
	throttle \
	min_hold \
	advisory \
	patterns \
	hostile_path \
	tokens \
	session_locks \
	direct_fallback \
	queue_paths \
	lease_paths \
	wait \
	publication

# Isolation specs (test/specs, expected/).
ISOLATION = \
	acquire_race \
	renew_takeover \
	non_owner \
	session_expiry_contended \
	heartbeat_takeover \
	fence_blocks_takeover \
	claim_skip_locked \
	zombie_ack \
	complete_reap \
	double_complete \
	cancel_complete \
	isolation_levels \
	throttle_race \
	advisory_wait \
	self_reap \
	heartbeat_own_lease \
	acquire_dead_session \
	reap_skips_held \
	close_foreign \
	close_rr \
	refused_heartbeat \
	maintain_skips_held \
	refusal_no_lock \
	throttle_foreign \
	foreign_stall \
	limit_count \
	open_reaps_dead \
	creator_cancel \
	admin_skips_held \
	queue_revoke \
	producer_cleanup \
	claim_position \
	heartbeat_memory \
	token_rebase \
	lease_session_snapshot \
	reindex_concurrently \
	ack_after_update \
	claim_position_multi \
	fence_recheck \
	fence_holder \
	token_floor \
	snapshot_heartbeat \
	foreign_reap \
	drop_owned_live

REGRESS_OPTS = --inputdir=test
ISOLATION_OPTS = --inputdir=test

PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-sign-compare \
	-Wno-missing-field-initializers

# PG=18 (or 15, 17...): the assert-enabled server test/pgbuild.sh builds
# from Debian's source package into its cache, once.  Otherwise PG_CONFIG,
# or the pg_config on PATH (Debian's 15).
ifneq ($(PG),)
PG_CONFIG := $(shell test/pgbuild.sh $(PG))
endif
PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)

# The objects are rebuilt when PG_CONFIG names another server.
PG_STAMP := .pg_config.stamp
$(shell echo '$(PG_CONFIG)' | cmp -s - $(PG_STAMP) || echo '$(PG_CONFIG)' > $(PG_STAMP))
EXTRA_CLEAN += $(PG_STAMP)
ifneq ($(PGXS),)
include $(PGXS)
else
# No server headers yet: "make deps", "make test" and "make demo" install them.
all:
	@echo "pg_config not found; run \"make deps\" first" >&2; exit 1
endif

# Every object includes the shared header (PGXS tracks no dependencies).
$(OBJS): src/distlock.h src/compat.h $(PG_STAMP)

.PHONY: deps test test-assert test-all demo bench

# Install what the build, the tests and the demo need (Debian packages).
deps:
	test/deps.sh

# Install what is missing, build with warnings as errors, install, and run
# every suite against throwaway clusters; ends with "N passed, N failed".
test: deps
	$(MAKE) all
	$(MAKE) install
	PG_CONFIG="$(PG_CONFIG)" test/run.sh --regress "$(REGRESS)" --isolation "$(ISOLATION)"

# The regression, isolation and fault-injection suites against PostgreSQL
# 15 built with assertions (test/pgbuild.sh builds it from Debian's source
# package once, into /var/cache/distlock-pg, about 2.5 minutes on 2 cores).
# The objects are rebuilt against its headers, and removed afterwards.
ASSERT_SCRIPTS = test/fault/run.sh test/failover/run.sh
test-assert: deps
	pgc=$$(test/pgbuild.sh 15) && \
	$(MAKE) clean && $(MAKE) PG_CONFIG=$$pgc all && \
	$(MAKE) PG_CONFIG=$$pgc install && \
	PG_CONFIG=$$pgc SCRIPTS="$(ASSERT_SCRIPTS)" test/run.sh \
		--regress "$(REGRESS)" --isolation "$(ISOLATION)"; \
	rc=$$?; $(MAKE) clean; exit $$rc

# The matrix: Debian's PostgreSQL 15, 15 with assertions, 18 with
# assertions, and 17 with assertions where its source package can be had.
test-all: deps
	.ci/run

# The demo client: a plain libpq program, not part of the extension.  Its
# flags are expanded only when it is built, after "deps" has installed
# pg_config.
DEMO_CFLAGS = -O2 -Wall -Wextra -Werror \
	-I$(shell $(PG_CONFIG) --includedir)
DEMO_LDFLAGS = -L$(shell $(PG_CONFIG) --libdir) -lpq -pthread
EXTRA_CLEAN += test/demo/demo

test/demo/demo: test/demo/demo.c
	cc $(DEMO_CFLAGS) -o $@ $< $(DEMO_LDFLAGS)

# Install what is missing, build and install, then watch worker processes
# coordinate through distlock on a throwaway cluster (or on DSN=...).
# Exits non-zero if any invariant the demo checks failed.
demo: deps
	$(MAKE) all install
	$(MAKE) test/demo/demo
	DSN="$(DSN)" test/demo/run.sh $(DEMO_ARGS)

# Install what is missing, build and install, then run distlock against the
# SQL it replaces on a throwaway cluster (bench/README.md); QUICK=1 for a
# short run.  Prints the table and writes bench/results/.  Measures only.
bench: deps
	$(MAKE) all install
	PG_CONFIG="$(PG_CONFIG)" QUICK="$(QUICK)" bench/run.sh
