# tests/ — one Criterion binary per tests/unit/*.c and tests/integration/*.c.
UNIT_TESTS += $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(wildcard tests/unit/*.c))
INT_TESTS  += $(patsubst tests/integration/%.c,$(BUILD)/tests/integration/%,$(wildcard tests/integration/*.c))

# tests/security/: hostile kernels through kforge-sim (no services) and
# through a worker (a full stack); both link the attack helpers sec_lib.c.
SEC_LIB_OBJ := $(BUILD)/obj/tests/security/sec_lib.o
UNIT_TESTS  += $(BUILD)/tests/security/test_sec_sim
INT_TESTS   += $(BUILD)/tests/security/test_sec_worker
$(BUILD)/tests/security/test_sec_sim $(BUILD)/tests/security/test_sec_worker: $(SEC_LIB_OBJ)

# tests/fuzz/: one libFuzzer harness per parser of untrusted input
# (fuzz_NAME.c defines LLVMFuzzerTestOneInput).  Every build links each
# harness with replay.c into $(BUILD)/tests/fuzz/replay_NAME, which
# test_fuzz_corpus runs over the committed corpus (seeds and every crash's
# reproducer) in `make test`; `make fuzz` (FUZZ=1, clang) links the same
# objects with libFuzzer into $(BUILD)/fuzz/fuzz_NAME (both link every
# library: the Makefile adds $(LIBS) once it is complete).
FUZZ_NAMES   := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_REPLAYS := $(addprefix $(BUILD)/tests/fuzz/replay_,$(FUZZ_NAMES))
$(BUILD)/obj/tests/fuzz/%.o: CFLAGS += -Isim -Iagent -Iapi $(SIM_PY_CFLAGS)
$(BUILD)/tests/fuzz/replay_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/replay.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(filter %.o,$^) -o $@ $(ALL_LDLIBS)
$(BUILD)/tests/unit/test_fuzz_corpus: | $(FUZZ_REPLAYS)
ifeq ($(FUZZ),1)
FUZZ_BINS += $(addprefix $(BUILD)/fuzz/fuzz_,$(FUZZ_NAMES))
$(BUILD)/fuzz/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer $(filter %.o,$^) -o $@ $(ALL_LDLIBS)
endif
