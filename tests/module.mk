# tests/ — one Criterion binary per tests/unit/*.c and tests/integration/*.c.
UNIT_TESTS += $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(wildcard tests/unit/*.c))
INT_TESTS  += $(patsubst tests/integration/%.c,$(BUILD)/tests/integration/%,$(wildcard tests/integration/*.c))

# tests/security/: hostile kernels through kforge-sim (no services) and
# through a worker (a full stack); both link the attack helpers sec_lib.c.
SEC_LIB_OBJ := $(BUILD)/obj/tests/security/sec_lib.o
UNIT_TESTS  += $(BUILD)/tests/security/test_sec_sim
INT_TESTS   += $(BUILD)/tests/security/test_sec_worker
$(BUILD)/tests/security/test_sec_sim $(BUILD)/tests/security/test_sec_worker: $(SEC_LIB_OBJ)
