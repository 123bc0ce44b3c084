// SPDX-License-Identifier: BSD-3-Clause
// Just enough JSON for the binding test vectors: a writer that prints numbers so they read back exactly, and a
// reader for what the writer produces (and any other standard JSON). Non-finite floats, which JSON cannot hold, are
// the strings "inf", "-inf" and "nan" (bindings/testdata/README.md).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fa_json {

// Shortest text that reads back as exactly `x` (std::to_chars), so a regenerated vector compares equal as text.
inline std::string number(double x) {
  if (std::isnan(x)) return "\"nan\"";
  if (std::isinf(x)) return x > 0 ? "\"inf\"" : "\"-inf\"";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

// The same for a value stored as FP32: the shortest text that reads back as that float.
inline std::string number(float x) {
  if (std::isnan(x) || std::isinf(x)) return number(double(x));
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

inline std::string quote(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool boolean = false;
  double num = 0;
  std::string str;
  std::vector<Value> items;
  std::vector<std::pair<std::string, Value>> members;  // file order kept, so errors can name the n-th entry

  bool isNull() const { return kind == Kind::Null; }
  const Value *find(const std::string &key) const {
    for (const auto &m : members)
      if (m.first == key) return &m.second;
    return nullptr;
  }
  const Value &at(const std::string &key) const {
    const Value *v = find(key);
    if (!v) throw std::runtime_error("missing key \"" + key + "\"");
    return *v;
  }
  // A number, or one of the strings standing for a non-finite float.
  double asDouble() const {
    if (kind == Kind::Number) return num;
    if (kind == Kind::String) {
      if (str == "nan") return std::nan("");
      if (str == "inf") return INFINITY;
      if (str == "-inf") return -INFINITY;
    }
    throw std::runtime_error("expected a number");
  }
  int64_t asInt() const {
    const double d = asDouble();
    if (d != std::floor(d) || std::fabs(d) > 9.0e15) throw std::runtime_error("expected an integer");
    return int64_t(d);
  }
  const std::string &asString() const {
    if (kind != Kind::String) throw std::runtime_error("expected a string");
    return str;
  }
  std::vector<double> doubles() const {
    std::vector<double> out;
    for (const auto &v : arrayItems()) out.push_back(v.asDouble());
    return out;
  }
  std::vector<int64_t> ints() const {
    std::vector<int64_t> out;
    for (const auto &v : arrayItems()) out.push_back(v.asInt());
    return out;
  }
  const std::vector<Value> &arrayItems() const {
    if (kind != Kind::Array) throw std::runtime_error("expected an array");
    return items;
  }
};

class Parser {
 public:
  explicit Parser(const std::string &text) : s_(text) {}
  Value parse() {
    Value v = value();
    skip();
    if (i_ != s_.size()) fail("text after the value");
    return v;
  }

 private:
  const std::string &s_;
  size_t i_ = 0;

  [[noreturn]] void fail(const std::string &what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(i_));
  }
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  bool take(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) fail(std::string("expected '") + c + "'");
  }
  bool word(const char *w) {
    const std::string t(w);
    if (s_.compare(i_, t.size(), t) == 0) {
      i_ += t.size();
      return true;
    }
    return false;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\') {
        if (i_ >= s_.size()) fail("unterminated escape");
        c = s_[i_++];
        switch (c) {
          case 'n': c = '\n'; break;
          case 't': c = '\t'; break;
          case 'r': c = '\r'; break;
          case 'b': c = '\b'; break;
          case 'f': c = '\f'; break;
          case '"': case '\\': case '/': break;
          default: fail("unsupported escape");  // \u never occurs in the vectors
        }
      }
      out += c;
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return out;
  }
  Value value() {
    skip();
    if (i_ >= s_.size()) fail("unexpected end");
    Value v;
    const char c = s_[i_];
    if (c == '{') {
      ++i_;
      v.kind = Value::Kind::Object;
      if (take('}')) return v;
      do {
        skip();
        std::string key = string();
        expect(':');
        v.members.emplace_back(std::move(key), value());
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      ++i_;
      v.kind = Value::Kind::Array;
      if (take(']')) return v;
      do v.items.push_back(value());
      while (take(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Value::Kind::String;
      v.str = string();
    } else if (word("null")) {
      v.kind = Value::Kind::Null;
    } else if (word("true")) {
      v.kind = Value::Kind::Bool;
      v.boolean = true;
    } else if (word("false")) {
      v.kind = Value::Kind::Bool;
    } else {
      v.kind = Value::Kind::Number;
      const char *begin = s_.data() + i_;
      const auto r = std::from_chars(begin, s_.data() + s_.size(), v.num);
      if (r.ec != std::errc() || r.ptr == begin) fail("bad number");
      i_ += size_t(r.ptr - begin);
    }
    return v;
  }
};

inline Value parse(const std::string &text) { return Parser(text).parse(); }

}  // namespace fa_json
