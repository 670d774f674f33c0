#include "config_rules.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace tg {

std::string show_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e16) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return std::strcmp(buf, "-0") == 0 ? "0" : buf;
  }
  // The shortest digits that read back as v: the first precision whose %e does.
  for (int precision = 0; precision < 17; precision++) {
    std::snprintf(buf, sizeof buf, "%.*e", precision, std::fabs(v));
    if (std::strtod(buf, nullptr) == std::fabs(v)) break;
  }
  // buf: d[.ddd]e±XX -> the digits and the decimal exponent, written as Python's repr writes them.
  std::string mantissa(buf, std::strchr(buf, 'e')), digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int e = std::atoi(std::strchr(buf, 'e') + 1);
  std::string s;
  if (e < -4 || e >= 16) {
    s = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + "e" +
        (e < 0 ? "-" : "+");
    std::snprintf(buf, sizeof buf, "%02d", std::abs(e));
    s += buf;
  } else if (e < 0) {
    s = "0." + std::string(static_cast<size_t>(-e - 1), '0') + digits;
  } else if (static_cast<int>(digits.size()) <= e + 1) {
    s = digits + std::string(static_cast<size_t>(e + 1 - static_cast<int>(digits.size())), '0') +
        ".0";
  } else {
    s = digits.substr(0, static_cast<size_t>(e + 1)) + "." +
        digits.substr(static_cast<size_t>(e + 1));
  }
  return (v < 0 ? "-" : "") + s;
}

std::string rule_text(const FieldRule& r) {
  const std::string kind = r.integer ? "an integer" : r.infinity ? "a number" : "a finite number";
  std::string text = kind;
  if (r.has_min && r.has_max)
    text = kind + " in " + (r.min_inclusive ? "[" : "(") + show_number(r.min) + ", " +
           show_number(r.max) + (r.max_inclusive ? "]" : ")");
  else if (r.has_min)
    text = kind + (r.min_inclusive ? " >= " : " > ") + show_number(r.min);
  else if (r.has_max)
    text = kind + (r.max_inclusive ? " <= " : " < ") + show_number(r.max);
  std::string notes;
  if (r.zero) notes = std::string("0: ") + r.zero;
  if (r.infinity) notes += (notes.empty() ? "" : "; ") + std::string("inf: ") + r.infinity;
  return notes.empty() ? text : text + " (" + notes + ")";
}

namespace {

bool in_bounds(const FieldRule& r, double v) {
  if (r.has_min && !(r.min_inclusive ? v >= r.min : v > r.min)) return false;
  if (r.has_max && !(r.max_inclusive ? v <= r.max : v < r.max)) return false;
  return true;
}

std::string refused(const FieldRule& r, const std::string& shown) {
  return std::string(r.name) + " must be " + rule_text(r) + ", got " + shown;
}

}  // namespace

std::string field_problem(const FieldRule& r, double value) {
  bool ok = !std::isnan(value) && (r.integer ? std::isfinite(value) && value == std::floor(value)
                                             : std::isfinite(value) || (value > 0 && r.infinity));
  return ok && in_bounds(r, value) ? "" : refused(r, show_number(value));
}

std::string field_problem(const FieldRule& r, int64_t value) {
  // Exact below 2^53; above, a bound in double compares the rounded value, which stays on its side.
  return in_bounds(r, static_cast<double>(value)) ? "" : refused(r, std::to_string(value));
}

std::string field_problem(const FieldRule& r, uint64_t value) {
  return in_bounds(r, static_cast<double>(value)) ? "" : refused(r, std::to_string(value));
}

std::string first_problem(std::initializer_list<Checked> fields) {
  const Checked* first = nullptr;
  for (const Checked& f : fields)
    if (!f.problem.empty() && (!first || f.rule.index < first->rule.index)) first = &f;
  return first ? first->problem : "";
}

std::string divisible_problem(const DivisibleCheck& check, int64_t a, int64_t b) {
  if (b != 0 && a % b == 0) return "";
  std::string message = check.message;
  const std::pair<std::string, int64_t> fill[] = {{check.a, a}, {check.b, b}};
  for (const auto& [key, value] : fill) {
    const std::string placeholder = "{" + key + "}", text = std::to_string(value);
    for (size_t at = message.find(placeholder); at != std::string::npos;
         at = message.find(placeholder, at + text.size()))
      message.replace(at, placeholder.size(), text);
  }
  return message;
}

}  // namespace tg
