# tests/ — one Criterion binary per tests/unit/*.c and tests/integration/*.c.
UNIT_TESTS += $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(wildcard tests/unit/*.c))
INT_TESTS  += $(patsubst tests/integration/%.c,$(BUILD)/tests/integration/%,$(wildcard tests/integration/*.c))
