// The rules of every config field (site/static/presets.json "rules") in C++: the types of the
// header scripts/config_rules_header.py generates from that file at build time
// (config_rules_generated.h, in the build folder), and the checks that turn a rule into the same
// sentence python_ref/config.py and webgpu/config_rules.js write, so a bad value is refused in the
// same words at every level (tests/site/test_config_rules.py).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

namespace tg {

// One field's rule. Bounds: min (>=) or above (>) when has_min, max (<=) or below (<) when has_max.
// A number is finite unless `infinity` says what +inf means; `zero` says what 0 means.
struct FieldRule {
  const char* name;  // the presets.json key (nLayer), which messages name
  int index;         // its position in its section: fields are checked in this order at every level
  bool integer;
  bool has_min, min_inclusive;
  double min;
  bool has_max, max_inclusive;
  double max;
  const char* zero;      // what 0 means, or nullptr
  const char* infinity;  // what +inf means (then +inf is accepted), or nullptr
};

// "a % b == 0" for two integer fields of a section, with the message ({a} and {b}: their values).
struct DivisibleCheck {
  const char* a;
  const char* b;
  const char* message;
};
struct CheckList {
  const DivisibleCheck* items;
  int count;
  const DivisibleCheck* begin() const { return items; }
  const DivisibleCheck* end() const { return items + count; }
};

// A number as python_ref writes it in a message: nan, inf, -inf; an integer-valued one below 1e16
// without ".0"; any other as Python's repr() of the float (shortest digits that read back; an
// exponent below 1e-4 and from 1e16 on: 1e-05, 0.1, 1e+16).
std::string show_number(double v);

// "an integer in [1, 4096]", "a finite number > 0", "a number > 0 (inf: no clipping)"...
std::string rule_text(const FieldRule& r);

// Empty if the rule accepts the value, else "<name> must be <rule_text>, got <value>".
std::string field_problem(const FieldRule& r, double value);
std::string field_problem(const FieldRule& r, int64_t value);
std::string field_problem(const FieldRule& r, uint64_t value);

// A field's problem (empty: none) with its rule, for first_problem.
struct Checked {
  const FieldRule& rule;
  std::string problem;
};
// The problem of the field first in its section's order, or empty: the one every level reports.
std::string first_problem(std::initializer_list<Checked> fields);

// Empty if a % b == 0, else the check's message with {a} and {b} filled in.
std::string divisible_problem(const DivisibleCheck& check, int64_t a, int64_t b);

}  // namespace tg
