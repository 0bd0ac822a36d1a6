#include "template/value.h"

#include <algorithm>
#include <cmath>

#include "template/callable.h"
#include "template/py_string.h"
#include "template/template_error.h"

namespace infera::jinja {

const Value* Dict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::Set(std::string key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::Keyword(std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

const std::string& Value::EmptyString() {
  static const std::string* const kEmpty = new std::string();
  return *kEmpty;
}

Value Value::Undefined(std::string name) {
  Value v;
  if (!name.empty()) v.payload_ = std::make_shared<const std::string>(std::move(name));
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  // Non-const object: AppendIfUnique may extend it while this value is its only owner.
  v.payload_ = std::make_shared<std::string>(std::move(s));
  return v;
}

bool Value::AppendIfUnique(std::string_view tail) {
  if (kind_ != Kind::kString || payload_ == nullptr || payload_.use_count() != 1) return false;
  const_cast<std::string*>(static_cast<const std::string*>(payload_.get()))->append(tail);
  return true;
}

Value Value::List(ValueList items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.is_tuple_ = is_tuple;
  v.payload_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::FromDict(Dict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.payload_ = std::make_shared<Dict>(std::move(dict));
  return v;
}

Value Value::Namespace(Dict attributes) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.payload_ = std::make_shared<Dict>(std::move(attributes));
  return v;
}

Value Value::Function(std::shared_ptr<const Callable> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.payload_ = std::move(fn);
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
    case nlohmann::ordered_json::value_t::discarded:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Float(static_cast<double>(u));
      return Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict dict;
      dict.items.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it) {
        dict.items.emplace_back(it.key(), FromJson(it.value()));
      }
      return FromDict(std::move(dict));
    }
    case nlohmann::ordered_json::value_t::binary:
      break;
  }
  return None();
}

double Value::AsDouble() const {
  switch (kind_) {
    case Kind::kFloat:
      return f_;
    case Kind::kInt:
      return static_cast<double>(i_);
    case Kind::kBool:
      return b_ ? 1.0 : 0.0;
    default:
      return 0;
  }
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0;
    case Kind::kString:
      return !str().empty();
    case Kind::kList:
      return !list().empty();
    case Kind::kDict:
      return !dict().items.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string_view Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return is_tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

namespace {

void AppendRepr(const Value& value, std::string& out);

void AppendDictRepr(const Dict& dict, std::string& out) {
  out.push_back('{');
  bool first = true;
  for (const auto& [k, v] : dict.items) {
    if (!first) out += ", ";
    first = false;
    out += py::ReprString(k);
    out += ": ";
    AppendRepr(v, out);
  }
  out.push_back('}');
}

void AppendRepr(const Value& value, std::string& out) {
  switch (value.kind()) {
    case Value::Kind::kString:
      out += py::ReprString(value.str());
      return;
    case Value::Kind::kList: {
      const ValueList& items = value.list();
      out.push_back(value.IsTuple() ? '(' : '[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        AppendRepr(items[i], out);
      }
      if (value.IsTuple() && items.size() == 1) out.push_back(',');
      out.push_back(value.IsTuple() ? ')' : ']');
      return;
    }
    case Value::Kind::kDict:
      AppendDictRepr(value.dict(), out);
      return;
    default:
      AppendPyStr(value, out);
  }
}

void AppendJson(const Value& value, const JsonOptions& options, int depth, std::string& out) {
  auto newline = [&](int level) {
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += options.indent;
  };
  if (depth > 512) ThrowRuntime("tojson: value nested too deeply");
  switch (value.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += value.bool_value() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(value.int_value());
      return;
    case Value::Kind::kFloat: {
      double f = value.AsDouble();
      if (std::isnan(f)) {
        out += "NaN";
      } else if (std::isinf(f)) {
        out += f > 0 ? "Infinity" : "-Infinity";
      } else {
        out += py::ReprFloat(f);
      }
      return;
    }
    case Value::Kind::kString:
      py::AppendJsonString(value.str(), options.ensure_ascii, out);
      return;
    case Value::Kind::kList: {
      const ValueList& items = value.list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += options.item_separator;
        if (options.has_indent) newline(depth + 1);
        AppendJson(items[i], options, depth + 1, out);
      }
      if (options.has_indent) newline(depth);
      out.push_back(']');
      return;
    }
    case Value::Kind::kDict: {
      const Dict& dict = value.dict();
      if (dict.items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      entries.reserve(dict.items.size());
      for (const auto& entry : dict.items) entries.push_back(&entry);
      if (options.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += options.item_separator;
        if (options.has_indent) newline(depth + 1);
        py::AppendJsonString(entries[i]->first, options.ensure_ascii, out);
        out += options.key_separator;
        AppendJson(entries[i]->second, options, depth + 1, out);
      }
      if (options.has_indent) newline(depth);
      out.push_back('}');
      return;
    }
    case Value::Kind::kUndefined:
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      ThrowRuntime("Object of type " + std::string(value.TypeName()) + " is not JSON serializable");
  }
}

int Sign(double d) { return d < 0 ? -1 : (d > 0 ? 1 : 0); }

}  // namespace

void AppendPyStr(const Value& value, std::string& out) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return;
    case Value::Kind::kNone:
      out += "None";
      return;
    case Value::Kind::kBool:
      out += value.bool_value() ? "True" : "False";
      return;
    case Value::Kind::kInt:
      out += std::to_string(value.int_value());
      return;
    case Value::Kind::kFloat:
      out += py::ReprFloat(value.AsDouble());
      return;
    case Value::Kind::kString:
      out += value.str();
      return;
    case Value::Kind::kList:
    case Value::Kind::kDict:
      AppendRepr(value, out);
      return;
    case Value::Kind::kNamespace:
      out += "<Namespace ";
      AppendDictRepr(value.dict(), out);
      out += ">";
      return;
    case Value::Kind::kCallable:
      out += value.callable().Repr();
      return;
  }
}

std::string ToPyStr(const Value& value) {
  if (value.IsString()) return value.str();
  std::string out;
  AppendPyStr(value, out);
  return out;
}

std::string ToPyRepr(const Value& value) {
  std::string out;
  AppendRepr(value, out);
  return out;
}

std::string ToJson(const Value& value, const JsonOptions& options) {
  std::string out;
  AppendJson(value, options, 0, out);
  return out;
}

bool Equals(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) {
    if (a.IsFloat() || b.IsFloat()) return a.AsDouble() == b.AsDouble();
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.list().size() != b.list().size()) return false;
      if (a.IsTuple() != b.IsTuple()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equals(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& da = a.dict();
      const Dict& db = b.dict();
      if (da.items.size() != db.items.size()) return false;
      for (const auto& [k, v] : da.items) {
        const Value* other = db.Find(k);
        if (other == nullptr || !Equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.dict() == &b.dict();
    case Value::Kind::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

int Compare(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) {
    if (a.IsFloat() || b.IsFloat()) return Sign(a.AsDouble() - b.AsDouble());
    int64_t x = a.int_value();
    int64_t y = b.int_value();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.IsString() && b.IsString()) {
    int c = a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.IsList() && b.IsList() && a.IsTuple() == b.IsTuple()) {
    const ValueList& x = a.list();
    const ValueList& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equals(x[i], y[i])) return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  ThrowRuntime("'<' not supported between instances of '" + std::string(a.TypeName()) + "' and '" +
               std::string(b.TypeName()) + "'");
}

}  // namespace infera::jinja
