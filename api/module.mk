# api/ — kforge-api: the HTTP API (libmicrohttpd, cJSON, libpq, hiredis via
# common/kf_queue).  Everything but main.c goes into libkfapi.a so that unit
# tests can link the pieces.
API_SRCS := $(filter-out api/main.c,$(wildcard api/*.c))
API_LIB  := $(BUILD)/lib/libkfapi.a
$(API_LIB): $(API_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/ui_assets.o
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

# The dashboard (ui/, docs/dashboard.md): tools/embed.c, built for this
# machine, writes every file of ui/ into a C file as bytes with its
# Content-Type and SHA-256 ETag; the object goes into libkfapi.a.  ui/ itself
# is a prerequisite so that adding or removing a file regenerates it.
UI_ASSETS := $(sort $(wildcard ui/*.html ui/*.js ui/*.css ui/*.svg))
$(BUILD)/tools/embed: tools/embed.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 $(WARN) $(PKG_CFLAGS) $< -o $@ $(shell pkg-config --libs libcrypto)
$(BUILD)/gen/ui_assets.c: $(BUILD)/tools/embed $(UI_ASSETS) ui
	@mkdir -p $(dir $@)
	$(BUILD)/tools/embed $@ $(UI_ASSETS)
$(BUILD)/obj/gen/ui_assets.o: $(BUILD)/gen/ui_assets.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iapi -c $< -o $@
