#include "template/builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <utility>

#include "template/interpreter.h"
#include "template/py_string.h"
#include "template/template_error.h"

namespace infera::jinja::builtins {
namespace {

[[noreturn]] void TypeError(const std::string& message) { ThrowRuntime(message); }

[[noreturn]] void Unsafe(std::string_view attr, const Value& obj) {
  ThrowRuntime("access to attribute '" + std::string(attr) + "' of '" +
               std::string(obj.TypeName()) + "' object is unsafe.");
}

const Value* Arg(const CallArgs& args, size_t index, std::string_view name) {
  if (index < args.positional.size()) return &args.positional[index];
  return args.Keyword(name);
}

int64_t IntArg(const CallArgs& args, size_t index, std::string_view name, int64_t fallback) {
  const Value* v = Arg(args, index, name);
  if (v == nullptr || v->IsNone()) return fallback;
  if (v->IsInt() || v->IsBool()) return v->int_value();
  TypeError("'" + std::string(name) + "' must be an integer, not '" + std::string(v->TypeName()) +
            "'");
}

bool BoolArg(const CallArgs& args, size_t index, std::string_view name, bool fallback) {
  const Value* v = Arg(args, index, name);
  return v == nullptr ? fallback : v->Truthy();
}

const std::string& StrArg(const CallArgs& args, size_t index, std::string_view name) {
  const Value* v = Arg(args, index, name);
  if (v == nullptr) TypeError("missing required argument '" + std::string(name) + "'");
  if (!v->IsString()) {
    TypeError("argument '" + std::string(name) + "' must be str, not " +
              std::string(v->TypeName()));
  }
  return v->str();
}

bool IsStrMethod(std::string_view n) {
  static const std::string_view kNames[] = {
      "strip",   "lstrip",  "rstrip",  "split",      "rsplit",       "startswith",   "endswith",
      "replace", "upper",   "lower",   "title",      "capitalize",   "find",         "rfind",
      "index",   "count",   "join",    "format",     "isdigit",      "isalpha",      "isalnum",
      "isspace", "isupper", "islower", "splitlines", "removeprefix", "removesuffix", "zfill",
      "ljust",   "rjust",   "center",  "swapcase",   "isnumeric",    "isdecimal"};
  return std::find(std::begin(kNames), std::end(kNames), n) != std::end(kNames);
}

bool IsDictMethod(std::string_view n) {
  static const std::string_view kNames[] = {"get", "items",   "keys",       "values", "copy",
                                            "pop", "popitem", "setdefault", "update", "clear"};
  return std::find(std::begin(kNames), std::end(kNames), n) != std::end(kNames);
}

bool IsListMethod(std::string_view n) {
  static const std::string_view kNames[] = {"index",  "count", "append", "extend",
                                            "insert", "pop",   "remove", "reverse",
                                            "sort",   "clear", "copy"};
  return std::find(std::begin(kNames), std::end(kNames), n) != std::end(kNames);
}

class BoundMethod final : public Callable {
 public:
  BoundMethod(Value obj, std::string name) : obj_(std::move(obj)), name_(std::move(name)) {}
  Value Call(Interpreter& in, CallArgs& args) const override {
    return CallMethod(in, obj_, name_, args);
  }
  std::string Repr() const override {
    return "<built-in method " + name_ + " of " + std::string(obj_.TypeName()) + " object>";
  }

 private:
  Value obj_;
  std::string name_;
};

Value Bound(const Value& obj, std::string_view name) {
  return Value::Function(std::make_shared<BoundMethod>(obj, std::string(name)));
}

Value Missing(const Value& obj, std::string_view name) {
  return Value::Undefined("'" + std::string(obj.TypeName()) + " object' has no attribute '" +
                          std::string(name) + "'");
}

std::string StrOf(const Value& v) { return ToPyStr(v); }

int64_t Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(py::CodePointCount(v.str()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict().items.size());
    default:
      TypeError("object of type '" + std::string(v.TypeName()) + "' has no len()");
  }
}

// Python slice index normalisation (PySlice_AdjustIndices).
void AdjustSlice(int64_t length, const Value& start_v, const Value& stop_v, const Value& step_v,
                 int64_t* start, int64_t* stop, int64_t* step) {
  auto as_int = [](const Value& v) {
    if (!v.IsInt() && !v.IsBool()) TypeError("slice indices must be integers or None");
    return v.int_value();
  };
  *step = step_v.IsNone() ? 1 : as_int(step_v);
  if (*step == 0) TypeError("slice step cannot be zero");
  if (start_v.IsNone()) {
    *start = *step < 0 ? length - 1 : 0;
  } else {
    *start = as_int(start_v);
    if (*start < 0) {
      *start += length;
      if (*start < 0) *start = *step < 0 ? -1 : 0;
    } else if (*start >= length) {
      *start = *step < 0 ? length - 1 : length;
    }
  }
  if (stop_v.IsNone()) {
    *stop = *step < 0 ? -1 : length;
  } else {
    *stop = as_int(stop_v);
    if (*stop < 0) {
      *stop += length;
      if (*stop < 0) *stop = *step < 0 ? -1 : 0;
    } else if (*stop >= length) {
      *stop = *step < 0 ? length - 1 : length;
    }
  }
}

Value MakeStrList(const std::vector<std::string>& parts) {
  ValueList items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.push_back(Value::String(p));
  return Value::List(std::move(items));
}

bool StartsWithAny(const std::string& s, const Value& prefix, bool ends) {
  auto check = [&](const Value& p) {
    if (!p.IsString()) TypeError("startswith first arg must be str or a tuple of str");
    const std::string& x = p.str();
    if (x.size() > s.size()) return false;
    return ends ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
  };
  if (prefix.IsList()) {
    for (const Value& p : prefix.list()) {
      if (check(p)) return true;
    }
    return false;
  }
  return check(prefix);
}

// Byte offset → code-point index.
int64_t CodePointIndex(const std::string& s, size_t byte_offset) {
  return static_cast<int64_t>(py::CodePointCount(std::string_view(s).substr(0, byte_offset)));
}

std::vector<std::string> SplitLines(const std::string& s, bool keepends) {
  std::vector<char32_t> cps = py::Decode(s);
  std::vector<std::string> out;
  size_t start = 0;
  size_t i = 0;
  while (i < cps.size()) {
    char32_t c = cps[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
               c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t end = i;
    size_t next = i + 1;
    if (c == '\r' && next < cps.size() && cps[next] == '\n') ++next;
    out.push_back(py::Encode(cps, start, keepends ? next : end));
    start = i = next;
  }
  if (start < cps.size()) out.push_back(py::Encode(cps, start, cps.size()));
  return out;
}

bool AllCodePoints(const std::string& s, bool (*pred)(char32_t)) {
  if (s.empty()) return false;
  for (char32_t c : py::Decode(s)) {
    if (!pred(c)) return false;
  }
  return true;
}

bool IsDigitCp(char32_t c) {
  return utf8proc_category_string(static_cast<utf8proc_int32_t>(c))[0] == 'N' &&
         utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND;
}
bool IsAlphaCp(char32_t c) {
  return utf8proc_category_string(static_cast<utf8proc_int32_t>(c))[0] == 'L';
}
bool IsAlnumCp(char32_t c) {
  const char* cat = utf8proc_category_string(static_cast<utf8proc_int32_t>(c));
  return cat[0] == 'L' || cat[0] == 'N';
}
bool IsSpaceCp(char32_t c) { return py::IsSpace(c); }

// str.islower()/isupper(): at least one cased character and all cased ones lower/upper.
bool CaseCheck(const std::string& s, bool upper) {
  bool cased = false;
  for (char32_t c : py::Decode(s)) {
    auto cp = static_cast<utf8proc_int32_t>(c);
    bool is_lower = utf8proc_toupper(cp) != cp;
    bool is_upper = utf8proc_tolower(cp) != cp;
    if (upper ? is_lower : is_upper) return false;
    if (is_lower || is_upper) cased = true;
  }
  return cased;
}

std::string Pad(const std::string& s, int64_t width, const std::string& fill, int mode) {
  int64_t len = static_cast<int64_t>(py::CodePointCount(s));
  if (width <= len) return s;
  int64_t total = width - len;
  int64_t left = mode == 0 ? total / 2 + (total & width & 1) : (mode < 0 ? 0 : total);
  int64_t right = total - left;
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < right; ++i) out += fill;
  return out;
}

// "{} {name} {0}".format(...): replacement fields without format specs.
std::string StrFormat(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
        out.push_back('{');
        ++i;
        continue;
      }
      size_t close = fmt.find('}', i);
      if (close == std::string::npos) TypeError("Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!") != std::string::npos) {
        TypeError("format specs are not supported in str.format");
      }
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
        ++auto_index;
      } else if (std::all_of(field.begin(), field.end(),
                             [](char d) { return d >= '0' && d <= '9'; })) {
        size_t idx = std::strtoul(field.c_str(), nullptr, 10);
        v = idx < args.positional.size() ? &args.positional[idx] : nullptr;
      } else {
        v = args.Keyword(field);
      }
      if (v == nullptr) TypeError("Replacement index out of range for positional args tuple");
      out += StrOf(*v);
      i = close;
    } else if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      out.push_back('}');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// printf-style "%s %d" % args.
std::string PercentFormat(const std::string& fmt, const Value& args_value) {
  ValueList args;
  if (args_value.IsTuple()) {
    args = args_value.list();
  } else {
    args.push_back(args_value);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) TypeError("incomplete format");
    std::string spec = "%";
    while (i < fmt.size() &&
           std::string_view("-+ #0123456789.").find(fmt[i]) != std::string_view::npos) {
      spec.push_back(fmt[i++]);
    }
    if (i >= fmt.size()) TypeError("incomplete format");
    char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= args.size()) TypeError("not enough arguments for format string");
    const Value& v = args[next++];
    char buf[512];
    switch (conv) {
      case 's':
      case 'r': {
        std::string s = conv == 's' ? StrOf(v) : ToPyRepr(v);
        spec += "s";
        std::snprintf(buf, sizeof(buf), spec.c_str(), s.c_str());
        out += s.size() >= sizeof(buf) - 1 ? s : std::string(buf);
        break;
      }
      case 'd':
      case 'i': {
        if (!v.IsNumber()) TypeError("%d format: a real number is required");
        if (v.IsFloat()) {
          const double d = std::trunc(v.AsDouble());
          if (!std::isfinite(d)) ThrowRuntime("cannot convert float infinity or NaN to integer");
          // Outside long long (a cast would be undefined): Python prints the float's
          // exact integer value, as %.0f does (width and flags are not applied).
          if (!(d >= -9.2e18 && d <= 9.2e18)) {
            std::snprintf(buf, sizeof(buf), "%.0f", d);
            out += buf;
            break;
          }
        }
        spec += "lld";
        std::snprintf(
            buf, sizeof(buf), spec.c_str(),
            static_cast<long long>(v.IsFloat() ? std::trunc(v.AsDouble()) : v.int_value()));
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'g': {
        if (!v.IsNumber()) TypeError("must be real number");
        spec.push_back(conv);
        std::snprintf(buf, sizeof(buf), spec.c_str(), v.AsDouble());
        out += buf;
        break;
      }
      default:
        TypeError(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (next < args.size() && args_value.IsTuple()) {
    TypeError("not all arguments converted during string formatting");
  }
  return out;
}

Value StrMethod(Interpreter& in, const Value& obj, std::string_view name, CallArgs& args) {
  const std::string& s = obj.str();
  auto chars_arg = [&](size_t idx) -> const std::string* {
    const Value* v = Arg(args, idx, "chars");
    if (v == nullptr || v->IsNone()) return nullptr;
    if (!v->IsString()) TypeError("strip arg must be None or str");
    return &v->str();
  };
  if (name == "strip") return Value::String(py::Strip(s, chars_arg(0), true, true));
  if (name == "lstrip") return Value::String(py::Strip(s, chars_arg(0), true, false));
  if (name == "rstrip") return Value::String(py::Strip(s, chars_arg(0), false, true));
  if (name == "split" || name == "rsplit") {
    const Value* sep = Arg(args, 0, "sep");
    int64_t max_split = IntArg(args, 1, "maxsplit", -1);
    if (sep == nullptr || sep->IsNone()) {
      if (name == "rsplit" && max_split >= 0)
        TypeError("rsplit() without sep and maxsplit is not supported");
      return MakeStrList(py::SplitWhitespace(s, max_split));
    }
    if (!sep->IsString()) TypeError("must be str or None");
    if (sep->str().empty()) TypeError("empty separator");
    return MakeStrList(name == "split" ? py::Split(s, sep->str(), max_split)
                                       : py::RSplit(s, sep->str(), max_split));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* p = Arg(args, 0, "prefix");
    if (p == nullptr) TypeError(std::string(name) + "() takes at least 1 argument");
    if (args.positional.size() > 1)
      TypeError(std::string(name) + "() start/end arguments are not supported");
    return Value::Bool(StartsWithAny(s, *p, name == "endswith"));
  }
  if (name == "replace") {
    const std::string& old_part = StrArg(args, 0, "old");
    const std::string& new_part = StrArg(args, 1, "new");
    int64_t count = IntArg(args, 2, "count", -1);
    std::string result = py::Replace(s, old_part, new_part, count);
    in.CheckOutputSize(result.size());
    return Value::String(std::move(result));
  }
  if (name == "upper") return Value::String(py::Upper(s));
  if (name == "lower") return Value::String(py::Lower(s));
  if (name == "title") return Value::String(py::Title(s));
  if (name == "capitalize") return Value::String(py::Capitalize(s));
  if (name == "swapcase") {
    std::string out;
    for (char32_t c : py::Decode(s)) {
      auto cp = static_cast<utf8proc_int32_t>(c);
      auto up = utf8proc_toupper(cp);
      py::AppendUtf8(static_cast<char32_t>(up != cp ? up : utf8proc_tolower(cp)), out);
    }
    return Value::String(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index") {
    const std::string& sub = StrArg(args, 0, "sub");
    size_t pos = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (pos == std::string::npos) {
      if (name == "index") TypeError("substring not found");
      return Value::Int(-1);
    }
    return Value::Int(CodePointIndex(s, pos));
  }
  if (name == "count") {
    const std::string& sub = StrArg(args, 0, "sub");
    if (sub.empty()) return Value::Int(static_cast<int64_t>(py::CodePointCount(s)) + 1);
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size()))
      ++n;
    return Value::Int(n);
  }
  if (name == "join") {
    const Value* seq = Arg(args, 0, "iterable");
    if (seq == nullptr) TypeError("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& item : Iterate(*seq)) {
      if (!item.IsString())
        TypeError("sequence item: expected str instance, " + std::string(item.TypeName()) +
                  " found");
      if (!first) out += s;
      first = false;
      out += item.str();
      in.CheckOutputSize(out.size());
    }
    return Value::String(std::move(out));
  }
  if (name == "format") return Value::String(StrFormat(s, args));
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric")
    return Value::Bool(AllCodePoints(s, IsDigitCp));
  if (name == "isalpha") return Value::Bool(AllCodePoints(s, IsAlphaCp));
  if (name == "isalnum") return Value::Bool(AllCodePoints(s, IsAlnumCp));
  if (name == "isspace") return Value::Bool(AllCodePoints(s, IsSpaceCp));
  if (name == "isupper") return Value::Bool(CaseCheck(s, true));
  if (name == "islower") return Value::Bool(CaseCheck(s, false));
  if (name == "splitlines") return MakeStrList(SplitLines(s, BoolArg(args, 0, "keepends", false)));
  if (name == "removeprefix") {
    const std::string& p = StrArg(args, 0, "prefix");
    return Value::String(s.compare(0, p.size(), p) == 0 && p.size() <= s.size() ? s.substr(p.size())
                                                                                : s);
  }
  if (name == "removesuffix") {
    const std::string& p = StrArg(args, 0, "suffix");
    bool has =
        !p.empty() && p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
    return Value::String(has ? s.substr(0, s.size() - p.size()) : s);
  }
  if (name == "zfill" || name == "ljust" || name == "rjust" || name == "center") {
    int64_t width = IntArg(args, 0, "width", 0);
    in.CheckOutputSize(static_cast<size_t>(std::max<int64_t>(width, 0)));
    if (name == "zfill") {
      int64_t len = static_cast<int64_t>(py::CodePointCount(s));
      if (width <= len) return obj;
      size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
      return Value::String(s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') +
                           s.substr(sign));
    }
    const Value* fill = Arg(args, 1, "fillchar");
    std::string f = fill != nullptr && fill->IsString() ? fill->str() : " ";
    return Value::String(Pad(s, width, f, name == "center" ? 0 : (name == "ljust" ? -1 : 1)));
  }
  return Missing(obj, name);
}

// Sort key helper for sort/dictsort/unique/min/max: lower-cases strings when
// case-insensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.IsString()) return Value::String(py::Lower(v.str()));
  return v;
}

Value AttrPath(const Value& item, const Value* attribute) {
  if (attribute == nullptr || attribute->IsNone()) return item;
  if (attribute->IsInt()) return GetItem(item, *attribute);
  std::string path = StrOf(*attribute);
  Value v = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(),
                                                [](char c) { return c >= '0' && c <= '9'; });
    v = numeric ? GetItem(v, Value::Int(std::strtoll(part.c_str(), nullptr, 10)))
                : GetItem(v, Value::String(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return v;
}

ValueList SortedItems(ValueList items, bool reverse, bool case_sensitive, const Value* attribute) {
  std::vector<std::pair<Value, size_t>> keyed;
  keyed.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    keyed.emplace_back(SortKey(AttrPath(items[i], attribute), case_sensitive), i);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    int c = Compare(a.first, b.first);
    return reverse ? c > 0 : c < 0;
  });
  ValueList out;
  out.reserve(items.size());
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return out;
}

Value ApplyRound(const Value& v, int64_t precision, const std::string& method) {
  if (!v.IsNumber())
    TypeError("type " + std::string(v.TypeName()) + " doesn't define __round__ method");
  double x = v.AsDouble();
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "common") {
    if (!v.IsFloat()) return Value::Int(v.int_value());  // round(int, n) stays int
    char buf[512];
    if (precision < 0 || precision > 300) return Value::Float(std::nearbyint(x * scale) / scale);
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), x);
    return Value::Float(std::strtod(buf, nullptr));
  }
  if (method == "ceil") return Value::Float(std::ceil(x * scale) / scale);
  if (method == "floor") return Value::Float(std::floor(x * scale) / scale);
  TypeError("method must be common, ceil or floor");
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

Value ToInt(const Value& v, const CallArgs& args) {
  const Value* def = Arg(args, 0, "default");
  Value fallback = def != nullptr ? *def : Value::Int(0);
  int64_t base = IntArg(args, 1, "base", 10);
  if (v.IsBool() || v.IsInt()) return Value::Int(v.int_value());
  if (v.IsFloat()) {
    double d = v.AsDouble();
    if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return fallback;
    return Value::Int(static_cast<int64_t>(d));
  }
  if (v.IsString()) {
    std::string s = py::Strip(v.str(), nullptr, true, true);
    std::string digits;
    for (char c : s) {
      if (c != '_') digits.push_back(c);
    }
    if (!digits.empty()) {
      char* end = nullptr;
      errno = 0;
      long long i = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
      if (*end == '\0' && errno == 0) return Value::Int(i);
      if (base == 10) {
        double d = std::strtod(digits.c_str(), &end);
        if (*end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) {
          return Value::Int(static_cast<int64_t>(d));
        }
      }
    }
  }
  return fallback;
}

Value ToFloat(const Value& v, const CallArgs& args) {
  const Value* def = Arg(args, 0, "default");
  Value fallback = def != nullptr ? *def : Value::Float(0.0);
  if (v.IsNumber()) return Value::Float(v.AsDouble());
  if (v.IsString()) {
    std::string s = py::Strip(v.str(), nullptr, true, true);
    if (!s.empty()) {
      char* end = nullptr;
      double d = std::strtod(s.c_str(), &end);
      if (*end == '\0') return Value::Float(d);
    }
  }
  return fallback;
}

Value Indent(const std::string& input, const CallArgs& args) {
  const Value* width = Arg(args, 0, "width");
  std::string indention =
      width == nullptr ? "    "
      : width->IsString()
          ? width->str()
          : std::string(static_cast<size_t>(std::clamp<int64_t>(width->int_value(), 0, 1 << 20)),
                        ' ');
  bool first = BoolArg(args, 1, "first", false);
  bool blank = BoolArg(args, 2, "blank", false);
  std::vector<std::string> lines = SplitLines(input + "\n", false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  if (first) rv = indention + rv;
  return Value::String(std::move(rv));
}

// Jinja2's `title` filter (not str.title): words split at runs of whitespace and
// "-({[<"; each piece gets its first code point upper-cased and the rest lower-cased.
std::string TitleFilter(const std::string& s) {
  std::vector<char32_t> cps = py::Decode(s);
  auto is_sep = [](char32_t c) {
    return py::IsSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t end = i + 1;
    bool sep = is_sep(cps[i]);
    while (end < cps.size() && is_sep(cps[end]) == sep) ++end;
    out += py::Upper(py::Encode(cps, i, i + 1));
    out += py::Lower(py::Encode(cps, i + 1, end));
    i = end;
  }
  return out;
}

Value ToJsonFilter(const Value& input, const CallArgs& args) {
  JsonOptions options;
  options.ensure_ascii = BoolArg(args, 0, "ensure_ascii", false);
  const Value* indent = Arg(args, 1, "indent");
  if (indent != nullptr && !indent->IsNone()) {
    options.has_indent = true;
    if (indent->IsString()) {
      options.indent = indent->str();
    } else if (indent->IsInt() || indent->IsBool()) {
      options.indent =
          std::string(static_cast<size_t>(std::clamp<int64_t>(indent->int_value(), 0, 1024)), ' ');
    } else {
      TypeError("indent must be an int or a str");
    }
    options.item_separator = ",";
  }
  const Value* separators = Arg(args, 2, "separators");
  if (separators != nullptr && !separators->IsNone()) {
    if (!separators->IsList() || separators->list().size() != 2 ||
        !separators->list()[0].IsString() || !separators->list()[1].IsString()) {
      TypeError("separators must be a (item_separator, key_separator) pair of strings");
    }
    options.item_separator = separators->list()[0].str();
    options.key_separator = separators->list()[1].str();
  }
  options.sort_keys = BoolArg(args, 3, "sort_keys", false);
  return Value::String(ToJson(input, options));
}

// select/reject/selectattr/rejectattr.
Value SelectFilter(Interpreter& in, const Value& input, CallArgs& args, bool with_attr, bool keep) {
  size_t next = 0;
  const Value* attribute = nullptr;
  if (with_attr) {
    if (args.positional.empty()) TypeError("missing attribute name");
    attribute = &args.positional[0];
    next = 1;
  }
  std::string test;
  if (next < args.positional.size()) {
    if (!args.positional[next].IsString()) TypeError("test name must be a string");
    test = args.positional[next].str();
    ++next;
  }
  CallArgs test_args;
  test_args.positional.assign(
      args.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next, args.positional.size())),
      args.positional.end());
  test_args.keyword = args.keyword;
  ValueList out;
  for (const Value& item : Iterate(input)) {
    Value v = AttrPath(item, attribute);
    bool ok = test.empty() ? v.Truthy() : in.ApplyTest(test, v, test_args);
    if (ok == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}

Value MapFilter(Interpreter& in, const Value& input, CallArgs& args) {
  ValueList out;
  if (const Value* attribute = args.Keyword("attribute")) {
    const Value* def = args.Keyword("default");
    for (const Value& item : Iterate(input)) {
      Value v = AttrPath(item, attribute);
      if (v.IsUndefined() && def != nullptr) v = *def;
      out.push_back(std::move(v));
    }
    return Value::List(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].IsString())
    TypeError("map requires a filter argument");
  std::string filter = args.positional[0].str();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : Iterate(input)) {
    CallArgs copy = rest;
    out.push_back(in.ApplyFilter(filter, item, copy));
  }
  return Value::List(std::move(out));
}

class RaiseException final : public Callable {
 public:
  Value Call(Interpreter&, CallArgs& args) const override {
    std::string message = args.positional.empty() ? "" : StrOf(args.positional[0]);
    throw TemplateError(TemplateError::Kind::kRaised, message);
  }
  std::string Repr() const override { return "<function raise_exception>"; }
};

class StrftimeNow final : public Callable {
 public:
  Value Call(Interpreter& in, CallArgs& args) const override {
    if (args.positional.empty() || !args.positional[0].IsString()) {
      TypeError("strftime_now() needs a format string");
    }
    const std::string& fmt = args.positional[0].str();
    if (fmt.empty()) return Value::String("");
    std::vector<char> buf(fmt.size() * 8 + 256);
    size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &in.now());
    return Value::String(std::string(buf.data(), n));
  }
  std::string Repr() const override { return "<function strftime_now>"; }
};

class Range final : public Callable {
 public:
  Value Call(Interpreter& in, CallArgs& args) const override {
    const auto& p = args.positional;
    auto as_int = [](const Value& v) {
      if (!v.IsInt() && !v.IsBool())
        TypeError("'" + std::string(v.TypeName()) + "' object cannot be interpreted as an integer");
      return v.int_value();
    };
    int64_t start = 0;
    int64_t stop = 0;
    int64_t step = 1;
    if (p.size() == 1) {
      stop = as_int(p[0]);
    } else if (p.size() == 2 || p.size() == 3) {
      start = as_int(p[0]);
      stop = as_int(p[1]);
      if (p.size() == 3) step = as_int(p[2]);
    } else {
      TypeError("range expected 1 to 3 arguments");
    }
    if (step == 0) TypeError("range() arg 3 must not be zero");
    ValueList out;
    __int128 count = step > 0 ? (static_cast<__int128>(stop) - start + step - 1) / step
                              : (static_cast<__int128>(start) - stop - step - 1) / -step;
    if (count > 100000)
      TypeError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    in.CountIterations(0);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::Int(i));
    return Value::List(std::move(out));
  }
  std::string Repr() const override { return "<class 'range'>"; }
};

class NamespaceFn final : public Callable {
 public:
  Value Call(Interpreter&, CallArgs& args) const override {
    Dict attrs;
    for (const Value& p : args.positional) {
      if (!p.IsDict()) TypeError("namespace() positional argument must be a dict");
      for (const auto& [k, v] : p.dict().items) attrs.Set(k, v);
    }
    for (const auto& [k, v] : args.keyword) attrs.Set(k, v);
    return Value::Namespace(std::move(attrs));
  }
  std::string Repr() const override { return "<class 'jinja2.utils.Namespace'>"; }
};

class DictFn final : public Callable {
 public:
  Value Call(Interpreter&, CallArgs& args) const override {
    Dict d;
    for (const Value& p : args.positional) {
      if (p.IsDict()) {
        for (const auto& [k, v] : p.dict().items) d.Set(k, v);
      } else {
        for (const Value& pair : Iterate(p)) {
          ValueList kv = Iterate(pair);
          if (kv.size() != 2 || !kv[0].IsString()) TypeError("dict() needs (str, value) pairs");
          d.Set(kv[0].str(), kv[1]);
        }
      }
    }
    for (const auto& [k, v] : args.keyword) d.Set(k, v);
    return Value::FromDict(std::move(d));
  }
  std::string Repr() const override { return "<class 'dict'>"; }
};

const std::string_view kFilters[] = {
    "abs",        "attr",     "batch",    "capitalize", "center", "count",  "d",
    "default",    "dictsort", "e",        "escape",     "first",  "float",  "forceescape",
    "format",     "indent",   "int",      "items",      "join",   "last",   "length",
    "list",       "lower",    "map",      "max",        "min",    "pprint", "reject",
    "rejectattr", "replace",  "reverse",  "round",      "safe",   "select", "selectattr",
    "sort",       "string",   "sum",      "title",      "tojson", "trim",   "truncate",
    "unique",     "upper",    "wordcount"};

const std::string_view kTests[] = {
    "boolean", "callable", "defined",  "divisibleby", "eq",       "equalto", "escaped",
    "even",    "false",    "filter",   "float",       "ge",       "gt",      "greaterthan",
    "in",      "integer",  "iterable", "le",          "lessthan", "lower",   "lt",
    "mapping", "ne",       "none",     "number",      "odd",      "sameas",  "sequence",
    "string",  "test",     "true",     "undefined",   "upper",    "==",      "!=",
    "<",       "<=",       ">",        ">="};

}  // namespace

bool IsFilter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool IsTest(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

void ThrowUndefined(const Value& value) {
  ThrowRuntime(value.undefined_name().empty() ? "undefined value" : value.undefined_name());
}

ValueList Iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return value.list();
    case Value::Kind::kDict: {
      ValueList keys;
      keys.reserve(value.dict().items.size());
      for (const auto& [k, v] : value.dict().items) keys.push_back(Value::String(k));
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      const std::string& s = value.str();
      if (py::IsAscii(s)) {
        chars.reserve(s.size());
        for (char c : s) chars.push_back(Value::String(std::string(1, c)));
        return chars;
      }
      for (char32_t cp : py::Decode(s)) {
        std::string one;
        py::AppendUtf8(cp, one);
        chars.push_back(Value::String(std::move(one)));
      }
      return chars;
    }
    default:
      TypeError("'" + std::string(value.TypeName()) + "' object is not iterable");
  }
}

Value Global(std::string_view name) {
  static const Value kRange = Value::Function(std::make_shared<Range>());
  static const Value kNamespace = Value::Function(std::make_shared<NamespaceFn>());
  static const Value kDict = Value::Function(std::make_shared<DictFn>());
  static const Value kRaise = Value::Function(std::make_shared<RaiseException>());
  static const Value kStrftime = Value::Function(std::make_shared<StrftimeNow>());
  if (name == "range") return kRange;
  if (name == "namespace") return kNamespace;
  if (name == "dict") return kDict;
  if (name == "raise_exception") return kRaise;
  if (name == "strftime_now") return kStrftime;
  return Value();
}

Value GetAttr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      ThrowUndefined(obj);
    case Value::Kind::kDict: {
      if (IsDictMethod(name)) return Bound(obj, name);
      if (const Value* v = obj.dict().Find(name)) return *v;
      return Missing(obj, name);
    }
    case Value::Kind::kNamespace: {
      if (const Value* v = obj.dict().Find(name)) return *v;
      return Missing(obj, name);
    }
    case Value::Kind::kString:
      if (IsStrMethod(name)) return Bound(obj, name);
      return Missing(obj, name);
    case Value::Kind::kList:
      if (IsListMethod(name)) return Bound(obj, name);
      return Missing(obj, name);
    default:
      return Missing(obj, name);
  }
}

Value GetItem(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      ThrowUndefined(obj);
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      if (key.IsString()) {
        if (const Value* v = obj.dict().Find(key.str())) return *v;
        if (obj.IsDict()) return GetAttr(obj, key.str());
      }
      return Value::Undefined("'" + std::string(obj.TypeName()) + " object' has no attribute " +
                              ToPyRepr(key));
    case Value::Kind::kList:
    case Value::Kind::kString: {
      if (key.IsString()) return GetAttr(obj, key.str());
      if (!key.IsInt() && !key.IsBool()) {
        return Value::Undefined("'" + std::string(obj.TypeName()) + " object' has no attribute " +
                                ToPyRepr(key));
      }
      int64_t i = key.int_value();
      if (obj.IsList()) {
        int64_t n = static_cast<int64_t>(obj.list().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::Undefined("list index out of range");
        return obj.list()[static_cast<size_t>(i)];
      }
      std::vector<char32_t> cps = py::Decode(obj.str());
      int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined("string index out of range");
      return Value::String(py::Encode(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
    }
    default:
      return Value::Undefined("'" + std::string(obj.TypeName()) + " object' has no attribute " +
                              ToPyRepr(key));
  }
}

Value Slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.IsUndefined()) ThrowUndefined(obj);
  int64_t start, stop, step;
  if (obj.IsList()) {
    const ValueList& items = obj.list();
    AdjustSlice(static_cast<int64_t>(items.size()), start_v, stop_v, step_v, &start, &stop, &step);
    ValueList out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
      out.push_back(items[static_cast<size_t>(i)]);
    return Value::List(std::move(out), obj.IsTuple());
  }
  if (obj.IsString()) {
    const std::string& s = obj.str();
    if (py::IsAscii(s)) {
      AdjustSlice(static_cast<int64_t>(s.size()), start_v, stop_v, step_v, &start, &stop, &step);
      if (step == 1)
        return Value::String(
            start < stop ? s.substr(static_cast<size_t>(start), static_cast<size_t>(stop - start))
                         : "");
      std::string out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        out.push_back(s[static_cast<size_t>(i)]);
      return Value::String(std::move(out));
    }
    std::vector<char32_t> cps = py::Decode(s);
    AdjustSlice(static_cast<int64_t>(cps.size()), start_v, stop_v, step_v, &start, &stop, &step);
    std::string out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
      py::AppendUtf8(cps[static_cast<size_t>(i)], out);
    return Value::String(std::move(out));
  }
  TypeError("'" + std::string(obj.TypeName()) + "' object is not subscriptable");
}

Value CallMethod(Interpreter& in, const Value& obj, std::string_view name, CallArgs& args) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      ThrowUndefined(obj);
    case Value::Kind::kString:
      if (IsStrMethod(name)) return StrMethod(in, obj, name, args);
      break;
    case Value::Kind::kDict: {
      const Dict& d = obj.dict();
      if (name == "get") {
        const Value* key = Arg(args, 0, "key");
        if (key == nullptr) TypeError("get expected at least 1 argument");
        const Value* def = Arg(args, 1, "default");
        if (key->IsString()) {
          if (const Value* v = d.Find(key->str())) return *v;
        }
        return def != nullptr ? *def : Value::None();
      }
      if (name == "items") {
        ValueList out;
        out.reserve(d.items.size());
        for (const auto& [k, v] : d.items) out.push_back(Value::List({Value::String(k), v}, true));
        return Value::List(std::move(out));
      }
      if (name == "keys") return Value::List(Iterate(obj));
      if (name == "values") {
        ValueList out;
        for (const auto& [k, v] : d.items) out.push_back(v);
        return Value::List(std::move(out));
      }
      if (name == "copy") return Value::FromDict(d);
      if (IsDictMethod(name)) Unsafe(name, obj);
      if (const Value* v = d.Find(name)) return in.Call(*v, args);
      break;
    }
    case Value::Kind::kList: {
      const ValueList& items = obj.list();
      if (name == "index" || name == "count") {
        if (args.positional.empty()) TypeError(std::string(name) + "() takes at least 1 argument");
        int64_t count = 0;
        for (size_t i = 0; i < items.size(); ++i) {
          if (Equals(items[i], args.positional[0])) {
            if (name == "index") return Value::Int(static_cast<int64_t>(i));
            ++count;
          }
        }
        if (name == "index") TypeError("value is not in list");
        return Value::Int(count);
      }
      if (name == "copy") return Value::List(items);
      if (IsListMethod(name)) Unsafe(name, obj);
      break;
    }
    default:
      break;
  }
  Value attr = GetAttr(obj, name);
  if (attr.IsUndefined()) ThrowUndefined(attr);
  return in.Call(attr, args);
}

bool Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.IsString())
        TypeError("'in <string>' requires string as left operand, not " +
                  std::string(item.TypeName()));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.list()) {
        if (Equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return item.IsString() && container.dict().Find(item.str()) != nullptr;
    default:
      TypeError("argument of type '" + std::string(container.TypeName()) + "' is not iterable");
  }
}

namespace {

Value IntResult(__int128 v) {
  if (v > INT64_MAX || v < INT64_MIN) ThrowRuntime("integer overflow");
  return Value::Int(static_cast<int64_t>(v));
}

Value Repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n <= 0) return seq.IsString() ? Value::String("") : Value::List({}, seq.IsTuple());
  if (seq.IsString()) {
    in.CheckOutputSize(seq.str().size() * static_cast<size_t>(std::min<int64_t>(n, 1 << 30)));
    std::string out;
    out.reserve(seq.str().size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value::String(std::move(out));
  }
  in.CountIterations(static_cast<int64_t>(seq.list().size()) * std::min<int64_t>(n, 1 << 30));
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value::List(std::move(out), seq.IsTuple());
}

}  // namespace

Value BinaryOp(Interpreter& in, std::string_view op, const Value& a, const Value& b) {
  if (a.IsUndefined()) ThrowUndefined(a);
  if (b.IsUndefined()) ThrowUndefined(b);
  auto unsupported = [&]() {
    TypeError("unsupported operand type(s) for " + std::string(op) + ": '" +
              std::string(a.TypeName()) + "' and '" + std::string(b.TypeName()) + "'");
  };
  const bool both_int = (a.IsInt() || a.IsBool()) && (b.IsInt() || b.IsBool());
  const bool both_num = a.IsNumber() && b.IsNumber();
  if (op == "+") {
    if (both_int) return IntResult(static_cast<__int128>(a.int_value()) + b.int_value());
    if (both_num) return Value::Float(a.AsDouble() + b.AsDouble());
    if (a.IsString() && b.IsString()) {
      in.CheckOutputSize(a.str().size() + b.str().size());
      std::string s;
      s.reserve(a.str().size() + b.str().size());
      s += a.str();
      s += b.str();
      return Value::String(std::move(s));
    }
    if (a.IsList() && b.IsList() && a.IsTuple() == b.IsTuple()) {
      ValueList items = a.list();
      items.insert(items.end(), b.list().begin(), b.list().end());
      return Value::List(std::move(items), a.IsTuple());
    }
    if (a.IsString() || b.IsString()) {
      TypeError("can only concatenate str (not \"" +
                std::string(a.IsString() ? b.TypeName() : a.TypeName()) + "\") to str");
    }
    unsupported();
  }
  if (op == "-") {
    if (both_int) return IntResult(static_cast<__int128>(a.int_value()) - b.int_value());
    if (both_num) return Value::Float(a.AsDouble() - b.AsDouble());
    unsupported();
  }
  if (op == "*") {
    if (both_int) return IntResult(static_cast<__int128>(a.int_value()) * b.int_value());
    if (both_num) return Value::Float(a.AsDouble() * b.AsDouble());
    if ((a.IsString() || a.IsList()) && (b.IsInt() || b.IsBool()))
      return Repeat(in, a, b.int_value());
    if ((b.IsString() || b.IsList()) && (a.IsInt() || a.IsBool()))
      return Repeat(in, b, a.int_value());
    unsupported();
  }
  if (op == "/") {
    if (!both_num) unsupported();
    if (b.AsDouble() == 0) ThrowRuntime("division by zero");
    return Value::Float(a.AsDouble() / b.AsDouble());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.IsString()) return Value::String(PercentFormat(a.str(), b));
    if (!both_num) unsupported();
    if (b.AsDouble() == 0)
      ThrowRuntime(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
    if (both_int) {
      int64_t x = a.int_value();
      int64_t y = b.int_value();
      if (x == INT64_MIN && y == -1) ThrowRuntime("integer overflow");
      int64_t q = x / y;
      int64_t r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return Value::Int(op == "//" ? q : r);
    }
    // CPython's float_divmod.
    double x = a.AsDouble();
    double y = b.AsDouble();
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0) {
      if ((y < 0) != (mod < 0)) {
        mod += y;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, y);
    }
    if (op == "%") return Value::Float(mod);
    double floordiv;
    if (div != 0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, x / y);
    }
    return Value::Float(floordiv);
  }
  if (op == "**") {
    if (both_int && b.int_value() >= 0) {
      __int128 result = 1;
      __int128 base = a.int_value();
      int64_t e = b.int_value();
      while (e > 0) {
        if (e & 1) {
          result *= base;
          if (result > INT64_MAX || result < INT64_MIN) ThrowRuntime("integer overflow");
        }
        e >>= 1;
        if (e > 0) {
          base *= base;
          if (base > INT64_MAX || base < INT64_MIN) ThrowRuntime("integer overflow");
        }
      }
      return Value::Int(static_cast<int64_t>(result));
    }
    if (both_num) {
      if (a.AsDouble() == 0 && b.AsDouble() < 0)
        ThrowRuntime("0.0 cannot be raised to a negative power");
      return Value::Float(std::pow(a.AsDouble(), b.AsDouble()));
    }
    unsupported();
  }
  ThrowRuntime("unknown operator " + std::string(op));
}

Value Filter(Interpreter& in, std::string_view name, const Value& input, CallArgs& args) {
  if (name == "default" || name == "d") {
    const Value* def = Arg(args, 0, "default_value");
    bool boolean = BoolArg(args, 1, "boolean", false);
    if (input.IsUndefined() || (boolean && !input.Truthy()))
      return def != nullptr ? *def : Value::String("");
    return input;
  }
  if (input.IsUndefined() && name != "length" && name != "count" && name != "list" &&
      name != "join" && name != "items" && name != "string" && name != "trim" && name != "first" &&
      name != "select" && name != "reject" && name != "selectattr" && name != "rejectattr" &&
      name != "map" && name != "upper" && name != "lower" && name != "safe" && name != "e" &&
      name != "escape" && name != "unique" && name != "sum" && name != "capitalize" &&
      name != "title" && name != "wordcount" && name != "indent") {
    ThrowUndefined(input);
  }
  if (name == "length" || name == "count") return Value::Int(Length(input));
  if (name == "string" || name == "safe") return Value::String(StrOf(input));
  if (name == "e" || name == "escape" || name == "forceescape")
    return Value::String(HtmlEscape(StrOf(input)));
  if (name == "trim") {
    const Value* chars = Arg(args, 0, "chars");
    const std::string* c = chars != nullptr && chars->IsString() ? &chars->str() : nullptr;
    return Value::String(py::Strip(StrOf(input), c, true, true));
  }
  if (name == "upper") return Value::String(py::Upper(StrOf(input)));
  if (name == "lower") return Value::String(py::Lower(StrOf(input)));
  if (name == "title") return Value::String(TitleFilter(StrOf(input)));
  if (name == "capitalize") return Value::String(py::Capitalize(StrOf(input)));
  if (name == "tojson") return ToJsonFilter(input, args);
  if (name == "list") {
    return Value::List(Iterate(input));
  }
  if (name == "items") {
    if (input.IsUndefined()) return Value::List({});
    if (!input.IsDict()) TypeError("Can only get item pairs from a mapping.");
    CallArgs none;
    return CallMethod(in, input, "items", none);
  }
  if (name == "join") {
    const Value* sep_v = Arg(args, 0, "d");
    std::string sep = sep_v != nullptr ? StrOf(*sep_v) : "";
    const Value* attribute = Arg(args, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : Iterate(input)) {
      if (!first) out += sep;
      first = false;
      AppendPyStr(AttrPath(item, attribute), out);
      in.CheckOutputSize(out.size());
    }
    return Value::String(std::move(out));
  }
  if (name == "first") {
    ValueList items = Iterate(input);
    if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
    return items.front();
  }
  if (name == "last") {
    ValueList items = Iterate(input);
    if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
    return items.back();
  }
  if (name == "reverse") {
    if (input.IsString()) {
      std::vector<char32_t> cps = py::Decode(input.str());
      std::reverse(cps.begin(), cps.end());
      return Value::String(py::Encode(cps, 0, cps.size()));
    }
    ValueList items = Iterate(input);
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "replace") {
    std::string s = StrOf(input);
    const Value* old_v = Arg(args, 0, "old");
    const Value* new_v = Arg(args, 1, "new");
    if (old_v == nullptr || new_v == nullptr) TypeError("replace needs old and new");
    std::string result = py::Replace(s, StrOf(*old_v), StrOf(*new_v), IntArg(args, 2, "count", -1));
    in.CheckOutputSize(result.size());
    return Value::String(std::move(result));
  }
  if (name == "int") return ToInt(input, args);
  if (name == "float") return ToFloat(input, args);
  if (name == "abs") {
    if (input.IsFloat()) return Value::Float(std::fabs(input.AsDouble()));
    if (input.IsInt() || input.IsBool()) {
      if (input.int_value() == INT64_MIN) ThrowRuntime("integer overflow");
      return Value::Int(std::llabs(input.int_value()));
    }
    TypeError("bad operand type for abs(): '" + std::string(input.TypeName()) + "'");
  }
  if (name == "round") {
    const Value* method = Arg(args, 1, "method");
    return ApplyRound(input, IntArg(args, 0, "precision", 0),
                      method != nullptr ? StrOf(*method) : "common");
  }
  if (name == "indent") return Indent(StrOf(input), args);
  if (name == "center") {
    int64_t width = IntArg(args, 0, "width", 80);
    in.CheckOutputSize(static_cast<size_t>(std::max<int64_t>(width, 0)));
    return Value::String(Pad(StrOf(input), width, " ", 0));
  }
  if (name == "map") return MapFilter(in, input, args);
  if (name == "select") return SelectFilter(in, input, args, false, true);
  if (name == "reject") return SelectFilter(in, input, args, false, false);
  if (name == "selectattr") return SelectFilter(in, input, args, true, true);
  if (name == "rejectattr") return SelectFilter(in, input, args, true, false);
  if (name == "attr") {
    const Value* attribute = Arg(args, 0, "name");
    if (attribute == nullptr || !attribute->IsString()) TypeError("attr needs a name");
    if (input.IsDict()) {
      if (IsDictMethod(attribute->str())) return Bound(input, attribute->str());
      return Missing(input, attribute->str());
    }
    return GetAttr(input, attribute->str());
  }
  if (name == "dictsort") {
    if (!input.IsDict()) TypeError("dictsort needs a mapping");
    bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
    const Value* by = Arg(args, 1, "by");
    bool by_value = by != nullptr && StrOf(*by) == "value";
    if (by != nullptr && !by_value && StrOf(*by) != "key")
      TypeError("You can only sort by either \"key\" or \"value\"");
    bool reverse = BoolArg(args, 2, "reverse", false);
    CallArgs none;
    ValueList pairs = CallMethod(in, input, "items", none).list();
    Value index = Value::Int(by_value ? 1 : 0);
    return Value::List(SortedItems(std::move(pairs), reverse, case_sensitive, &index));
  }
  if (name == "sort") {
    bool reverse = BoolArg(args, 0, "reverse", false);
    bool case_sensitive = BoolArg(args, 1, "case_sensitive", false);
    const Value* attribute = Arg(args, 2, "attribute");
    return Value::List(SortedItems(Iterate(input), reverse, case_sensitive, attribute));
  }
  if (name == "unique") {
    bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
    const Value* attribute = Arg(args, 1, "attribute");
    ValueList out;
    ValueList seen;
    for (const Value& item : Iterate(input)) {
      Value key = SortKey(AttrPath(item, attribute), case_sensitive);
      bool dup = false;
      for (const Value& s : seen) dup |= Equals(s, key);
      if (!dup) {
        seen.push_back(key);
        out.push_back(item);
      }
    }
    return Value::List(std::move(out));
  }
  if (name == "min" || name == "max") {
    bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
    const Value* attribute = Arg(args, 1, "attribute");
    ValueList items = Iterate(input);
    if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      int c = Compare(SortKey(AttrPath(items[i], attribute), case_sensitive),
                      SortKey(AttrPath(items[best], attribute), case_sensitive));
      if (name == "min" ? c < 0 : c > 0) best = i;
    }
    return items[best];
  }
  if (name == "sum") {
    const Value* attribute = Arg(args, 0, "attribute");
    const Value* start = Arg(args, 1, "start");
    Value total = start != nullptr ? *start : Value::Int(0);
    for (const Value& item : Iterate(input))
      total = BinaryOp(in, "+", total, AttrPath(item, attribute));
    return total;
  }
  if (name == "batch") {
    int64_t size = IntArg(args, 0, "linecount", 1);
    if (size <= 0) TypeError("batch size must be positive");
    const Value* fill = Arg(args, 1, "fill_with");
    ValueList out;
    ValueList current;
    for (const Value& item : Iterate(input)) {
      current.push_back(item);
      if (static_cast<int64_t>(current.size()) == size) {
        out.push_back(Value::List(std::move(current)));
        current.clear();
      }
    }
    if (!current.empty()) {
      if (fill != nullptr && !fill->IsNone()) {
        while (static_cast<int64_t>(current.size()) < size) current.push_back(*fill);
      }
      out.push_back(Value::List(std::move(current)));
    }
    return Value::List(std::move(out));
  }
  if (name == "truncate") {
    std::string s = StrOf(input);
    int64_t length = IntArg(args, 0, "length", 255);
    bool killwords = BoolArg(args, 1, "killwords", false);
    const Value* end_v = Arg(args, 2, "end");
    std::string end = end_v != nullptr ? StrOf(*end_v) : "...";
    int64_t leeway = IntArg(args, 3, "leeway", 5);
    std::vector<char32_t> cps = py::Decode(s);
    int64_t n = static_cast<int64_t>(cps.size());
    if (n <= length + leeway) return Value::String(s);
    int64_t keep =
        std::clamp<int64_t>(length - static_cast<int64_t>(py::CodePointCount(end)), 0, n);
    std::string head = py::Encode(cps, 0, static_cast<size_t>(keep));
    if (killwords) return Value::String(head + end);
    size_t space = head.rfind(' ');
    if (space != std::string::npos) head = head.substr(0, space);
    return Value::String(head + end);
  }
  if (name == "wordcount") {
    int64_t words = 0;
    bool in_word = false;
    for (char32_t c : py::Decode(StrOf(input))) {
      bool w = IsAlnumCp(c) || c == '_';
      if (w && !in_word) ++words;
      in_word = w;
    }
    return Value::Int(words);
  }
  if (name == "format") {
    Value tuple = Value::List(args.positional, true);
    return Value::String(PercentFormat(StrOf(input), tuple));
  }
  if (name == "pprint") return Value::String(ToPyRepr(input));
  ThrowRuntime("No filter named '" + std::string(name) + "'.");
}

bool Test(Interpreter& in, std::string_view name, const Value& input, CallArgs& args) {
  const Value* arg = Arg(args, 0, "other");
  auto need_arg = [&]() -> const Value& {
    if (arg == nullptr) TypeError("test '" + std::string(name) + "' needs an argument");
    return *arg;
  };
  if (name == "defined") return !input.IsUndefined();
  if (name == "undefined") return input.IsUndefined();
  if (name == "none") return input.IsNone();
  if (name == "boolean") return input.IsBool();
  if (name == "false") return input.IsBool() && !input.bool_value();
  if (name == "true") return input.IsBool() && input.bool_value();
  if (name == "integer") return input.IsInt();
  if (name == "float") return input.IsFloat();
  if (name == "number") return input.IsNumber();
  if (name == "string") return input.IsString();
  if (name == "mapping") return input.IsDict();
  if (name == "iterable")
    return input.IsUndefined() || input.IsString() || input.IsList() || input.IsDict();
  if (name == "sequence")
    return input.IsUndefined() || input.IsString() || input.IsList() || input.IsDict();
  if (name == "callable") return input.IsCallable();
  if (name == "escaped") return false;
  if (name == "filter") return input.IsString() && IsFilter(input.str());
  if (name == "test") return input.IsString() && IsTest(input.str());
  if (name == "lower") return input.IsString() && CaseCheck(input.str(), false);
  if (name == "upper") return input.IsString() && CaseCheck(input.str(), true);
  if (name == "even" || name == "odd") {
    if (!input.IsInt() && !input.IsBool())
      TypeError("not all arguments converted during string formatting");
    bool even = input.int_value() % 2 == 0;
    return name == "even" ? even : !even;
  }
  if (name == "divisibleby") {
    const Value& d = need_arg();
    Value r = BinaryOp(in, "%", input, d);
    return r.IsFloat() ? r.AsDouble() == 0 : r.int_value() == 0;
  }
  if (name == "sameas") {
    const Value& other = need_arg();
    if (input.kind() != other.kind()) return false;
    if (input.IsList() || input.IsDict() || input.IsNamespace()) {
      return input.IsList() ? &input.list() == &other.list() : &input.dict() == &other.dict();
    }
    return Equals(input, other);
  }
  if (name == "eq" || name == "equalto" || name == "==") return Equals(input, need_arg());
  if (name == "ne" || name == "!=") return !Equals(input, need_arg());
  if (name == "lt" || name == "lessthan" || name == "<") return Compare(input, need_arg()) < 0;
  if (name == "le" || name == "<=") return Compare(input, need_arg()) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return Compare(input, need_arg()) > 0;
  if (name == "ge" || name == ">=") return Compare(input, need_arg()) >= 0;
  if (name == "in") return Contains(need_arg(), input);
  ThrowRuntime("No test named '" + std::string(name) + "'.");
}

}  // namespace infera::jinja::builtins
