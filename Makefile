# kforge — top-level, non-recursive Makefile.
#
# Every part lives in its own folder with a `module.mk` that this file
# includes; a module.mk appends to the variables below and never defines
# rules of its own unless the part needs something special (the simulator
# embeds CPython, for instance).  Objects and binaries go under $(BUILD), so
# a sanitizer build (`make SANITIZE=1 ...`) never mixes with a normal one.
#
#   make            build every library and binary
#   make test       install packages (scripts/deps.sh), build, run the
#                   Python client's unit tests, start Redis + PostgreSQL on
#                   free loopback ports, run every test binary, print
#                   "N passed, N failed"
#   make test-python   the Python client's unit tests and the device
#                   runner's (tools/kforge-neuron-runner against the Neuron
#                   SDK stand-ins, kforge-sim from $(BUILD)/bin) alone
#   make run        install packages, build, the whole stack on
#                   127.0.0.1:8080 with a durable PostgreSQL (see README.md)
#   make lint       cppcheck + clang-tidy over the sources, Redocly's OpenAPI
#                   linter over api/openapi.json (scripts/openapi-lint.sh)
#   make bench      benchmarks in bench/ (not part of make test)
#   make mcp-inspector-check   `kforge mcp` driven by the official MCP
#                   Inspector's CLI (npm, pinned in tools/mcp-inspector;
#                   not part of make test: it needs the npm registry)
#   make SANITIZE=1 test   the same tests under ASan + UBSan (float-cast-overflow too)
#   make fuzz       every libFuzzer harness in tests/fuzz/ for FUZZ_SECONDS
#                   each (default 60), built with clang under build-fuzz/

CC       ?= cc
SANITIZE ?= 0
PREFIX   ?= /usr/local

ifeq ($(FUZZ),1)
# libFuzzer build (`make fuzz`): clang, every object instrumented for
# coverage (fuzzer-no-link) and checked by ASan + UBSan; the harnesses link
# libFuzzer's main (tests/fuzz/module.mk).
BUILD    ?= build-fuzz
ifeq ($(origin CC),default)
CC       := clang
endif
SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined,float-cast-overflow -fno-omit-frame-pointer \
            -fno-sanitize-recover=all
OPT      ?= -O1 -g
else ifeq ($(SANITIZE),1)
BUILD    ?= build-asan
SANFLAGS := -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer \
            -fno-sanitize-recover=undefined,float-cast-overflow
OPT      ?= -O1 -g
else
BUILD    ?= build
SANFLAGS :=
OPT      ?= -O2 -g
endif

# pkg-config flags; system headers are included with -isystem so that
# -Wextra -Werror applies to our code only.
PKGS      := libmicrohttpd hiredis libcjson libcurl libpq libssl libcrypto libseccomp
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null | sed 's/-I/-isystem /g')
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CRIT_CFLAGS := $(shell pkg-config --cflags criterion 2>/dev/null)
CRIT_LIBS   := $(shell pkg-config --libs criterion 2>/dev/null)

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
        -Wmissing-prototypes -Wformat=2 -Wno-format-nonliteral \
        -Wvla -Wpointer-arith -Wcast-qual -Wundef
CFLAGS ?=
CFLAGS += -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) $(SANFLAGS) \
          -I. -Icommon -Idb $(PKG_CFLAGS) -MMD -MP
LDFLAGS += $(SANFLAGS) -Wl,--as-needed
LDLIBS  += -lm -lpthread

# Filled in by the module.mk files.
LIBS      :=   # static libraries, in link order (dependents first)
LIBS_TAIL :=   # libraries every other one depends on (common)
BINS      :=   # installed binaries
UNIT_TESTS :=  # test binaries needing no services
FUZZ_BINS  :=  # libFuzzer harnesses (built only with FUZZ=1)
INT_TESTS  :=  # test binaries needing Redis + PostgreSQL (tests/run.sh)
EXTRA_LDLIBS :=

all:

include $(sort $(wildcard */module.mk))
LIBS += $(LIBS_TAIL)

ALL_LDLIBS = $(LIBS) $(EXTRA_LDLIBS) $(PKG_LIBS) $(LDLIBS)

all: $(BINS)

# Binaries link against the libraries; declared here, after every module.mk,
# when LIBS is complete (a module.mk included early sees only part of it).
$(BINS) $(FUZZ_REPLAYS) $(FUZZ_BINS): $(LIBS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# Test sources are compiled with Criterion's flags.
$(BUILD)/obj/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(CRIT_CFLAGS) -c $< -o $@

TEST_LIB_OBJS = $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/lib/*.c))
$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_LIB_OBJS) $(LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(EXTRA_LDLIBS) $(PKG_LIBS) $(CRIT_LIBS) $(LDLIBS)

tests: $(BINS) $(UNIT_TESTS) $(INT_TESTS)

# `make test` and `make run` install the packages before they build
# (scripts/deps.sh: as root it installs what is missing; otherwise it
# prints the apt-get line and fails, so nothing is compiled against
# missing headers).  The build is a fresh make, whose pkg-config flags
# see what was just installed.
test: deps
	$(MAKE) tests
	$(MAKE) test-python
	BUILD=$(BUILD) tests/run.sh $(UNIT_TESTS) -- $(INT_TESTS)

# The Python client's unit tests (clients/python/tests: stdlib unittest
# against a scripted server, no Redis or PostgreSQL needed), with Debian's
# Python, the one the simulator embeds.  Its end-to-end test against a
# whole stack is tests/integration/test_pyclient.  Then the Neuron device
# runner's tests (tests/neuron_runner), which need kforge-sim built.
PYTHON ?= /usr/bin/python3
test-python:
	timeout -k 10 300 $(PYTHON) -m unittest discover -s clients/python/tests
	PATH="$(abspath $(BUILD))/bin:$$PATH" timeout -k 10 600 $(PYTHON) -m unittest discover -s tests/neuron_runner

run: deps
	$(MAKE) all
	BUILD=$(BUILD) scripts/run.sh

deps:
	scripts/deps.sh

LINT_SRCS = $(shell git ls-files '*.c' 2>/dev/null)
LINT_INC  = -I. $(addprefix -I,$(sort $(dir $(wildcard */module.mk)))) -Itests/lib
lint:
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	  --std=c11 --inline-suppr --suppress=missingIncludeSystem --library=.cppcheck/kforge.cfg \
	  $(LINT_INC) $(LINT_SRCS)
	printf '%s\n' $(LINT_SRCS) | xargs -P "$$(nproc)" -n 8 sh -c \
	  'clang-tidy --quiet "$$@" -- -std=c11 -D_GNU_SOURCE $(LINT_INC) $(PKG_CFLAGS) $(CRIT_CFLAGS) $(SIM_PY_CFLAGS)' clang-tidy
	scripts/openapi-lint.sh
	BUILD=$(BUILD) deploy/check.sh

bench: all
	BUILD=$(BUILD) bench/run.sh

mcp-inspector-check: $(BUILD)/bin/kforge
	BUILD=$(BUILD) scripts/mcp-inspector-check.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 tools/kforge-neuron-runner $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PREFIX)/share/kforge/targets $(DESTDIR)$(PREFIX)/share/kforge/migrations \
	  $(DESTDIR)$(PREFIX)/share/kforge/kernels
	install -m 0644 sim/targets/*.json $(DESTDIR)$(PREFIX)/share/kforge/targets/
	install -m 0644 migrations/*.sql $(DESTDIR)$(PREFIX)/share/kforge/migrations/
	install -m 0644 kernels/*.py $(DESTDIR)$(PREFIX)/share/kforge/kernels/
	install -d $(DESTDIR)$(PREFIX)/share/kforge/docs
	install -m 0644 docs/sim-nki.md docs/sim-errors.md $(DESTDIR)$(PREFIX)/share/kforge/docs/

# `make fuzz` installs the packages (clang and libFuzzer among them),
# re-enters make with FUZZ=1 (another build folder, clang), then runs each
# harness for FUZZ_SECONDS on its committed seed corpus.
FUZZ_SECONDS ?= 60
fuzz: deps
	$(MAKE) FUZZ=1 BUILD=build-fuzz fuzz-bins
	BUILD=build-fuzz FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run.sh $(FUZZ_ONLY)

fuzz-bins: $(FUZZ_BINS)

clean:
	rm -rf build build-asan build-fuzz

.PHONY: all tests test test-python run deps lint bench install clean fuzz fuzz-bins mcp-inspector-check
.SECONDARY:

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
