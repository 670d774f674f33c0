# Native build of the C++ core (g++ or clang++): the shared library the Python tests load through
# ctypes, the native test programs, and one AddressSanitizer + UBSan build of the C API test.
# Every wasm/src/*.cpp goes in (the model and the matmul/thread-pool files alike).
NATIVE := $(BUILD)/native
NATIVE_CXX ?= g++
NATIVE_SRCS := $(wildcard wasm/src/*.cpp)
# The config rules of site/static/presets.json as a header (scripts/config_rules_header.py), written before
# anything compiles: the C++ core cannot read the JSON when it runs.
NATIVE_INCLUDE := $(NATIVE)/include
RULES_HEADER := $(NATIVE_INCLUDE)/config_rules_generated.h
NATIVE_CXXFLAGS := -std=c++17 -O3 -march=native -fPIC -pthread -Wall -Wextra -MMD -MP -Iwasm/src \
  -I$(NATIVE_INCLUDE)
# The portable PRNG must round every product separately (docs/determinism.md): no FMA contraction.
NATIVE_FLAGS_prng := -ffp-contract=off
ASAN_CXXFLAGS := -std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
  -fno-sanitize-recover=undefined -pthread -Wall -Wextra -MMD -MP -Iwasm/src -I$(NATIVE_INCLUDE)

NATIVE_OBJS := $(patsubst wasm/src/%.cpp,$(NATIVE)/obj/%.o,$(NATIVE_SRCS))
ASAN_OBJS := $(patsubst wasm/src/%.cpp,$(NATIVE)/asan/%.o,$(NATIVE_SRCS))
# test_api.cpp is built only with the sanitizers (test_api_asan below).
NATIVE_TESTS := $(patsubst wasm/tests/%.cpp,$(NATIVE)/%,$(filter-out wasm/tests/test_api.cpp,$(wildcard wasm/tests/*.cpp)))

BUILD_TARGETS += native
.PHONY: native
native: $(NATIVE)/libtinygpt.so $(NATIVE_TESTS) $(NATIVE)/test_api_asan

# Rewritten only when its text changes, so an edit elsewhere in presets.json recompiles nothing.
$(RULES_HEADER): site/static/presets.json scripts/config_rules_header.py
	@python3 scripts/config_rules_header.py $< $@

$(NATIVE)/obj/%.o: wasm/src/%.cpp $(RULES_HEADER)
	@mkdir -p $(@D)
	@echo "  CXX     $<"
	@$(NATIVE_CXX) $(NATIVE_CXXFLAGS) $(NATIVE_FLAGS_$*) -c $< -o $@

$(NATIVE)/asan/%.o: wasm/src/%.cpp $(RULES_HEADER)
	@mkdir -p $(@D)
	@echo "  CXX asan $<"
	@$(NATIVE_CXX) $(ASAN_CXXFLAGS) $(NATIVE_FLAGS_$*) -c $< -o $@

$(NATIVE)/libtinygpt.so: $(NATIVE_OBJS)
	@echo "  LINK    $@"
	@$(NATIVE_CXX) -shared -pthread -o $@ $^

$(NATIVE)/tests/%.o: wasm/tests/%.cpp $(RULES_HEADER)
	@mkdir -p $(@D)
	@echo "  CXX     $<"
	@$(NATIVE_CXX) $(NATIVE_CXXFLAGS) -c $< -o $@

$(NATIVE)/%: $(NATIVE)/tests/%.o $(NATIVE_OBJS)
	@echo "  LINK    $@"
	@$(NATIVE_CXX) -pthread -o $@ $^

# The test programs' objects are made through a pattern chain, so make would delete them as
# intermediates after each build and relink the programs on the next one (8 s instead of 1 s).
.SECONDARY: $(patsubst $(NATIVE)/%,$(NATIVE)/tests/%.o,$(NATIVE_TESTS))

$(NATIVE)/tests/test_api_asan.o: wasm/tests/test_api.cpp $(RULES_HEADER)
	@mkdir -p $(@D)
	@echo "  CXX asan $<"
	@$(NATIVE_CXX) $(ASAN_CXXFLAGS) -c $< -o $@

$(NATIVE)/test_api_asan: $(NATIVE)/tests/test_api_asan.o $(ASAN_OBJS)
	@echo "  LINK    $@"
	@$(NATIVE_CXX) $(ASAN_CXXFLAGS) -o $@ $^

-include $(NATIVE_OBJS:.o=.d) $(ASAN_OBJS:.o=.d) $(wildcard $(NATIVE)/tests/*.d)
