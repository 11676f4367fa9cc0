# scheduler/ — kforge-scheduler: outbox relay, reaper, promoter,
# reconciliation and retention under a Redis leader lock.
$(BUILD)/bin/kforge-scheduler: $(BUILD)/obj/scheduler/main.o $(BUILD)/lib/libkfdb.a $(COMMON_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(filter %.o,$^) -o $@ $(ALL_LDLIBS)
BINS += $(BUILD)/bin/kforge-scheduler
