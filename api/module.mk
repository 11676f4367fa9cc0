# api/ — kforge-api: the HTTP API (libmicrohttpd, cJSON, libpq, hiredis via
# common/kf_queue).  Everything but main.c goes into libkfapi.a so that unit
# tests can link the pieces.
API_SRCS := $(filter-out api/main.c,$(wildcard api/*.c))
API_LIB  := $(BUILD)/lib/libkfapi.a
$(API_LIB): $(API_SRCS:%.c=$(BUILD)/obj/%.o)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^
LIBS += $(API_LIB)

# The migrations folder defaults to the source tree's; the OpenAPI file is
# embedded with .incbin, which -MMD does not see.
$(BUILD)/obj/api/api_migrate.o: CFLAGS += -DKF_SOURCE_DIR='"$(CURDIR)"'
$(BUILD)/obj/api/api_openapi.o: api/openapi.json

$(BUILD)/bin/kforge-api: $(BUILD)/obj/api/main.o $(API_LIB) $(BUILD)/lib/libkfdb.a $(BUILD)/lib/libkfcommon.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $(filter %.o,$^) -o $@ $(ALL_LDLIBS)
BINS += $(BUILD)/bin/kforge-api
