# bench/ — benchmark programs, built by `make bench` (not by `make all`) and
# run by bench/run.sh.  One binary per bench/*.c, linked against the
# simulator and common libraries (named by path: this file is read before
# sim/ and common/ define their variables).
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c))
# bench/lib/kb_util: what the service benchmarks share (tokens, SQL, clock).
BENCH_LIBS := $(BUILD)/obj/bench/lib/kb_util.o $(BUILD)/lib/libkfsim.a $(BUILD)/lib/libkfcommon.a
$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BENCH_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(EXTRA_LDLIBS) $(PKG_LIBS) $(LDLIBS)
bench: $(BENCH_BINS)
# artifact_bench also links the artifact store (libkfdb, zlib, libpq);
# sse_bench writes its events through kf_db_apply (the one writer of
# job_events), so it links libkfdb too.
$(BUILD)/bench/artifact_bench: $(BUILD)/obj/bench/artifact_bench.o $(BUILD)/lib/libkfdb.a $(BENCH_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(EXTRA_LDLIBS) $(PKG_LIBS) $(LDLIBS)
$(BUILD)/bench/sse_bench: $(BUILD)/obj/bench/sse_bench.o $(BUILD)/lib/libkfdb.a $(BENCH_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(EXTRA_LDLIBS) $(PKG_LIBS) $(LDLIBS)
# ui_bench drives Chromium with the tests' DevTools client (tests/lib/kf_test_cdp).
$(BUILD)/bench/ui_bench: $(BUILD)/obj/bench/ui_bench.o $(BUILD)/obj/tests/lib/kf_test_cdp.o $(BENCH_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@ $(EXTRA_LDLIBS) $(PKG_LIBS) $(LDLIBS)
