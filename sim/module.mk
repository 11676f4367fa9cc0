# sim/ — the NeuronCore simulator: libkfsim.a (core, numerics, record,
# timing, profiler, the embedded-CPython `nki` module) and kforge-sim.
SIM_PY_CFLAGS := $(shell pkg-config --cflags python3-embed 2>/dev/null | sed 's/-I/-isystem /g') \
                 -isystem $(shell /usr/bin/python3 -c 'import numpy; print(numpy.get_include())' 2>/dev/null)
SIM_PY_LIBS   := $(shell pkg-config --libs python3-embed 2>/dev/null)
# Tile matmuls use OpenBLAS sgemm (Debian's libopenblas0-pthread), loaded
# at run time by sim_numerics.c (headers only at build time).
SIM_BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null | sed 's/-I/-isystem /g')
SIM_BLAS_LIBS   := -ldl
SIM_SRCS := $(filter-out sim/main.c,$(wildcard sim/*.c))
SIM_LIB  := $(BUILD)/lib/libkfsim.a
$(SIM_LIB): $(SIM_SRCS:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^
# The numerics walk tiles element by element: let GCC vectorize those loops
# at -O2 with its full cost model (-O2 alone only vectorizes loops whose trip
# count it knows).  Element-wise results do not change: nothing here allows
# reassociating floating-point sums.
SIM_VEC_CFLAGS := $(if $(findstring clang,$(CC)),,-ftree-vectorize -fvect-cost-model=dynamic)
$(BUILD)/obj/sim/%.o: CFLAGS += -Isim $(SIM_PY_CFLAGS) $(SIM_BLAS_CFLAGS) $(SIM_VEC_CFLAGS)
LIBS += $(SIM_LIB)
EXTRA_LDLIBS += $(SIM_PY_LIBS) $(SIM_BLAS_LIBS)

$(BUILD)/bin/kforge-sim: $(BUILD)/obj/sim/main.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(filter %.o,$^) -o $@ $(ALL_LDLIBS)
BINS += $(BUILD)/bin/kforge-sim

# The simulator's build id (sim_build.h): SHA-256 of its own sources, the
# ones that decide what it computes, so two runs compare on what the
# simulator was, whatever git knows; sim_build.o is rebuilt when any of
# them changes.
SIM_BUILD_SRCS := $(sort $(filter-out sim/sim_build.c,$(wildcard sim/*.c sim/*.h)))
SIM_BUILD_ID   := $(shell cat $(SIM_BUILD_SRCS) | sha256sum | cut -c1-16)
$(BUILD)/obj/sim/sim_build.o: CFLAGS += -DSIM_BUILD_ID='"src-sha256:$(SIM_BUILD_ID)"'
$(BUILD)/obj/sim/sim_build.o: $(SIM_BUILD_SRCS)
