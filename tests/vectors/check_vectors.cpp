// SPDX-License-Identifier: BSD-3-Clause
// Two checks on the shared binding test vectors (bindings/testdata):
//
//   check_vectors run DIR              every vector through the C API on a HOST handle, outputs poisoned with NaN,
//                                      held to the vector's own gates: a vector whose expected values or gates are
//                                      wrong fails here before any binding reads it.
//   check_vectors compare FRESH SAVED  the vectors make_vectors just wrote equal the checked-in ones (same files,
//                                      same keys, same values), so the checked-in set never goes stale.
//
// The runner reads only the vector (never the generator's code), as a binding does.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "json_lite.hpp"

namespace {

using fa_json::Value;
namespace fs = std::filesystem;

std::string readFile(const fs::path &p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<fs::path> vectorFiles(const fs::path &dir) {
  std::vector<fs::path> files;
  for (const auto &e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string lastError() {
  char buf[1024];
  flashAttnGetLastErrorMessage(buf, sizeof buf);
  return buf;
}

void check(flashAttnStatus_t s, const char *what) {
  if (s != FLASHATTN_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + flashAttnGetErrorString(s) + ": " + lastError());
}

// An FP32 tensor of a vector with its descriptor. The buffer spans every addressed element.
struct Tensor {
  std::vector<int64_t> dims, strides;
  std::vector<float> data;
  flashAttnTensorDescriptor_t desc = nullptr;

  explicit Tensor(const Value &v) : dims(v.at("dims").ints()), strides(v.at("strides").ints()) {
    if (dims.size() != strides.size()) throw std::runtime_error("dims and strides differ in length");
    int64_t span = 1;
    for (size_t i = 0; i < dims.size(); ++i) span += (dims[i] - 1) * strides[i];
    data.assign(size_t(span), std::numeric_limits<float>::quiet_NaN());
    if (const Value *d = v.find("data")) {
      const std::vector<double> values = d->doubles();
      if (values.size() != data.size())
        throw std::runtime_error("data holds " + std::to_string(values.size()) + " values, the strides span " +
                                 std::to_string(span));
      std::transform(values.begin(), values.end(), data.begin(), [](double x) { return float(x); });
    }
    check(flashAttnCreateTensorDescriptor(&desc), "flashAttnCreateTensorDescriptor");
    check(flashAttnSetTensorDescriptor(desc, FLASHATTN_DATA_FP32, int32_t(dims.size()), dims.data(), strides.data()),
          "flashAttnSetTensorDescriptor");
  }
  ~Tensor() { flashAttnDestroyTensorDescriptor(desc); }
  Tensor(const Tensor &) = delete;
  Tensor &operator=(const Tensor &) = delete;
  float *ptr() { return data.data(); }
};

struct Objects {
  flashAttnHandle_t handle = nullptr;
  flashAttnAttentionDescriptor_t attn = nullptr;
  flashAttnSeqDescriptor_t seq = nullptr;
  std::vector<int32_t> cuQ, cuK, kvLengths, blockTable;
  ~Objects() {
    flashAttnDestroySeqDescriptor(seq);
    flashAttnDestroyAttentionDescriptor(attn);
    flashAttnDestroy(handle);
  }
};

std::vector<int32_t> int32s(const Value &v) {
  std::vector<int32_t> out;
  for (int64_t x : v.ints()) out.push_back(int32_t(x));
  return out;
}

flashAttnMaskMode_t maskOf(const std::string &name) {
  if (name == "none") return FLASHATTN_MASK_NONE;
  if (name == "causal_top_left") return FLASHATTN_MASK_CAUSAL_TOP_LEFT;
  if (name == "causal_bottom_right") return FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT;
  throw std::runtime_error("unknown mask \"" + name + "\"");
}

void setUp(const Value &vec, Objects &obj) {
  check(flashAttnCreateWithBackend(&obj.handle, FLASHATTN_BACKEND_HOST), "flashAttnCreateWithBackend");
  const Value &a = vec.at("attention");
  if (!a.isNull()) {
    check(flashAttnCreateAttentionDescriptor(&obj.attn), "flashAttnCreateAttentionDescriptor");
    check(flashAttnSetAttentionScale(obj.attn, float(a.at("scale").asDouble())), "flashAttnSetAttentionScale");
    check(flashAttnSetAttentionMask(obj.attn, maskOf(a.at("mask").asString())), "flashAttnSetAttentionMask");
    const std::vector<int64_t> w = a.at("window").ints();
    if (w.size() != 2) throw std::runtime_error("window needs two values");
    check(flashAttnSetAttentionWindow(obj.attn, w[0], w[1]), "flashAttnSetAttentionWindow");
    check(flashAttnSetAttentionSoftcap(obj.attn, float(a.at("softcap").asDouble())), "flashAttnSetAttentionSoftcap");
    check(flashAttnSetAttentionDeterministic(obj.attn, int32_t(a.at("deterministic").asInt())),
          "flashAttnSetAttentionDeterministic");
  }
  const Value &s = vec.at("seq");
  if (s.isNull()) return;
  check(flashAttnCreateSeqDescriptor(&obj.seq), "flashAttnCreateSeqDescriptor");
  for (const auto &m : s.members) {
    if (m.first == "ragged") {
      obj.cuQ = int32s(m.second.at("cu_seqlens_q"));
      obj.cuK = int32s(m.second.at("cu_seqlens_k"));
      check(flashAttnSetSeqRagged(obj.seq, int64_t(obj.cuQ.size()) - 1, obj.cuQ.data(), obj.cuK.data(),
                                  m.second.at("max_q").asInt(), m.second.at("max_k").asInt()),
            "flashAttnSetSeqRagged");
    } else if (m.first == "kv_lengths") {
      obj.kvLengths = int32s(m.second);
      check(flashAttnSetSeqKvLengths(obj.seq, int64_t(obj.kvLengths.size()), obj.kvLengths.data()),
            "flashAttnSetSeqKvLengths");
    } else if (m.first == "paged") {
      const auto &rows = m.second.at("block_table").arrayItems();
      const int64_t maxPages = rows.empty() ? 0 : int64_t(rows[0].arrayItems().size());
      for (const Value &row : rows) {
        const std::vector<int32_t> r = int32s(row);
        if (int64_t(r.size()) != maxPages) throw std::runtime_error("block_table rows differ in length");
        obj.blockTable.insert(obj.blockTable.end(), r.begin(), r.end());
      }
      check(flashAttnSetSeqPaged(obj.seq, int64_t(rows.size()), obj.blockTable.data(), maxPages),
            "flashAttnSetSeqPaged");
    } else {
      throw std::runtime_error("unknown seq key \"" + m.first + "\"");
    }
  }
}

// Holds one output to its gate: every element finite (or -inf exactly where the expected LSE is -inf),
// max|out - expected| <= max_abs, and ||out - expected|| / ||expected|| <= normwise when the gate has one.
std::string gateFailure(const std::string &name, const Tensor &out, const Value &expected, const Value &gate) {
  const std::vector<double> ref = expected.at("data").doubles();
  const double maxAbs = gate.at("max_abs").asDouble();
  const Value *normwise = gate.find("normwise");
  double maxErr = 0, num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double got = out.data[i];
    if (std::isinf(ref[i])) {
      if (got != ref[i]) return name + "[" + std::to_string(i) + "] = " + std::to_string(got) + ", expected -inf";
      continue;
    }
    if (!std::isfinite(got)) return name + "[" + std::to_string(i) + "] is not finite (" + std::to_string(got) + ")";
    const double e = std::fabs(got - ref[i]);
    maxErr = std::max(maxErr, e);
    num += e * e;
    den += ref[i] * ref[i];
  }
  std::ostringstream msg;
  if (maxErr > maxAbs) msg << name << ": max error " << maxErr << " > " << maxAbs;
  if (normwise) {
    const double nw = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    if (nw > normwise->asDouble()) msg << (maxErr > maxAbs ? "; " : "") << name << ": normwise error " << nw << " > " << normwise->asDouble();
  }
  return msg.str();
}

void runVector(const Value &vec) {
  if (vec.at("dtype").asString() != "fp32") throw std::runtime_error("only fp32 vectors exist");
  Objects obj;
  setUp(vec, obj);
  const Value &in = vec.at("inputs"), &exp = vec.at("expected");
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> outputs;
  for (const auto &m : exp.members) outputs.emplace_back(m.first, std::make_unique<Tensor>(m.second));
  auto output = [&](const std::string &name) -> Tensor * {
    for (auto &o : outputs)
      if (o.first == name) return o.second.get();
    return nullptr;
  };
  auto input = [&](const char *name) { return std::make_unique<Tensor>(in.at(name)); };
  auto descOf = [](Tensor *t) { return t ? t->desc : nullptr; };
  auto ptrOf = [](Tensor *t) { return t ? t->ptr() : nullptr; };

  // Sinks live in the attention descriptor, so they are set there rather than passed to the call; dSinks too.
  std::unique_ptr<Tensor> sinks;
  if (in.find("sinks")) {
    if (!obj.attn) throw std::runtime_error("sinks need an attention descriptor");
    sinks = input("sinks");
    check(flashAttnSetAttentionSinks(obj.attn, sinks->ptr()), "flashAttnSetAttentionSinks");
  }
  if (Tensor *dSinks = output("dsinks")) {
    if (!obj.attn) throw std::runtime_error("dsinks need an attention descriptor");
    check(flashAttnSetAttentionSinksGradient(obj.attn, dSinks->ptr()), "flashAttnSetAttentionSinksGradient");
  }

  const std::string op = vec.at("op").asString();
  size_t bytes = 0;
  std::vector<uint8_t> storage;
  auto workspace = [&]() -> void * {
    storage.assign(bytes + 256, 0xff);  // any contents must do (header): not zeros
    const auto addr = reinterpret_cast<uintptr_t>(storage.data());
    return bytes ? storage.data() + ((256 - addr % 256) % 256) : nullptr;
  };
  if (op == "forward" || op == "decode") {
    auto q = input("q"), k = input("k"), v = input("v");
    Tensor *o = output("o"), *lse = output("lse");
    if (!o) throw std::runtime_error("no expected o");
    if (op == "forward") {
      check(flashAttnForwardGetWorkspaceSize(obj.handle, obj.attn, obj.seq, q->desc, k->desc, v->desc, o->desc,
                                             descOf(lse), &bytes),
            "flashAttnForwardGetWorkspaceSize");
      void *ws = workspace();
      check(flashAttnForward(obj.handle, obj.attn, obj.seq, q->desc, q->ptr(), k->desc, k->ptr(), v->desc, v->ptr(),
                             o->desc, o->ptr(), descOf(lse), ptrOf(lse), ws, bytes),
            "flashAttnForward");
    } else {
      const int32_t chunks = int32_t(vec.at("chunks").asInt());
      check(flashAttnDecodeChunkGetWorkspaceSize(obj.handle, obj.attn, obj.seq, q->desc, k->desc, v->desc, o->desc,
                                                 descOf(lse), chunks, &bytes),
            "flashAttnDecodeChunkGetWorkspaceSize");
      void *ws = workspace();
      check(flashAttnDecodeChunk(obj.handle, obj.attn, obj.seq, q->desc, q->ptr(), k->desc, k->ptr(), v->desc,
                                 v->ptr(), o->desc, o->ptr(), descOf(lse), ptrOf(lse), chunks, ws, bytes),
            "flashAttnDecodeChunk");
    }
  } else if (op == "backward") {
    auto q = input("q"), k = input("k"), v = input("v"), o = input("o"), lse = input("lse"), dO = input("do");
    Tensor *dQ = output("dq"), *dK = output("dk"), *dV = output("dv");
    if (!dQ || !dK || !dV) throw std::runtime_error("a backward vector expects dq, dk and dv");
    check(flashAttnBackwardGetWorkspaceSize(obj.handle, obj.attn, obj.seq, q->desc, k->desc, v->desc, o->desc,
                                            lse->desc, &bytes),
          "flashAttnBackwardGetWorkspaceSize");
    void *ws = workspace();
    check(flashAttnBackward(obj.handle, obj.attn, obj.seq, q->desc, q->ptr(), k->desc, k->ptr(), v->desc, v->ptr(),
                            o->desc, o->ptr(), dO->desc, dO->ptr(), lse->desc, lse->ptr(), dQ->desc, dQ->ptr(),
                            dK->desc, dK->ptr(), dV->desc, dV->ptr(), ws, bytes),
          "flashAttnBackward");
  } else if (op == "merge") {
    auto po = input("partial_o"), pl = input("partial_lse");
    Tensor *o = output("o"), *lse = output("lse");
    if (!o) throw std::runtime_error("no expected o");
    check(flashAttnMergeStatesGetWorkspaceSize(obj.handle, po->desc, pl->desc, o->desc, descOf(lse), &bytes),
          "flashAttnMergeStatesGetWorkspaceSize");
    void *ws = workspace();
    check(flashAttnMergeStates(obj.handle, po->desc, po->ptr(), pl->desc, pl->ptr(), o->desc, o->ptr(), descOf(lse),
                               ptrOf(lse), ws, bytes),
          "flashAttnMergeStates");
  } else {
    throw std::runtime_error("unknown op \"" + op + "\"");
  }

  std::string failures;
  const Value &gates = vec.at("gates");
  for (auto &o : outputs) {
    const Value *gate = gates.find(o.first);
    if (!gate) throw std::runtime_error("no gate for expected " + o.first);
    const std::string f = gateFailure(o.first, *o.second, exp.at(o.first), *gate);
    if (!f.empty()) failures += "  " + f + "\n";
  }
  if (gates.members.size() != outputs.size()) throw std::runtime_error("a gate names no expected tensor");
  if (!failures.empty()) throw std::runtime_error("gates failed:\n" + failures);
}

int run(const fs::path &dir) {
  const std::vector<fs::path> files = vectorFiles(dir);
  if (files.empty()) {
    std::fprintf(stderr, "check_vectors: no vector in %s\n", dir.c_str());
    return 1;
  }
  int failed = 0;
  std::set<std::string> ops;
  for (const fs::path &f : files) {
    try {
      const Value vec = fa_json::parse(readFile(f));
      if (vec.at("name").asString() != f.stem().string()) throw std::runtime_error("name differs from the file name");
      runVector(vec);
      ops.insert(vec.at("op").asString());
      if (vec.at("inputs").find("sinks")) ops.insert(vec.at("op").asString() + " with sinks");
      if (vec.at("expected").find("dsinks")) ops.insert("dsinks");
      std::printf("PASS %s\n", f.filename().c_str());
    } catch (const std::exception &e) {
      std::printf("FAIL %s: %s\n", f.filename().c_str(), e.what());
      ++failed;
    }
  }
  // The vectors exist to cover every operation, and every one that takes sinks with them; losing one kind must not
  // pass unnoticed.
  for (const char *op : {"forward", "backward", "decode", "merge", "forward with sinks", "backward with sinks",
                         "decode with sinks", "dsinks"})
    if (!ops.count(op)) {
      std::printf("FAIL: no passing %s vector\n", op);
      ++failed;
    }
  return failed ? 1 : 0;
}

// Equal values: the same structure, and numbers equal up to a relative 1e-12 (the float64 oracle's last bits may
// differ between libm versions; the inputs, stored as FP32, must then still be the same floats).
std::string difference(const Value &a, const Value &b, const std::string &path) {
  const bool aNum = a.kind == Value::Kind::Number || (a.kind == Value::Kind::String && (a.str == "nan" || a.str == "inf" || a.str == "-inf"));
  const bool bNum = b.kind == Value::Kind::Number || (b.kind == Value::Kind::String && (b.str == "nan" || b.str == "inf" || b.str == "-inf"));
  if (aNum && bNum) {
    const double x = a.asDouble(), y = b.asDouble();
    if (std::isnan(x) && std::isnan(y)) return "";
    if (x == y) return "";
    if (std::isfinite(x) && std::isfinite(y) && std::fabs(x - y) <= 1e-12 * std::max(std::fabs(x), std::fabs(y)))
      return "";
    std::ostringstream s;
    s.precision(17);
    s << path << ": " << x << " vs " << y;
    return s.str();
  }
  if (a.kind != b.kind) return path + ": different kinds of value";
  switch (a.kind) {
    case Value::Kind::Null: return "";
    case Value::Kind::Bool: return a.boolean == b.boolean ? "" : path + ": differs";
    case Value::Kind::Number: return "";
    case Value::Kind::String: return a.str == b.str ? "" : path + ": \"" + a.str + "\" vs \"" + b.str + "\"";
    case Value::Kind::Array:
      if (a.items.size() != b.items.size()) return path + ": " + std::to_string(a.items.size()) + " vs " +
                                                   std::to_string(b.items.size()) + " entries";
      for (size_t i = 0; i < a.items.size(); ++i) {
        std::string d = difference(a.items[i], b.items[i], path + "[" + std::to_string(i) + "]");
        if (!d.empty()) return d;
      }
      return "";
    case Value::Kind::Object:
      if (a.members.size() != b.members.size()) return path + ": different keys";
      for (const auto &m : a.members) {
        const Value *other = b.find(m.first);
        if (!other) return path + "." + m.first + ": missing";
        std::string d = difference(m.second, *other, path + "." + m.first);
        if (!d.empty()) return d;
      }
      return "";
  }
  return "";
}

int compare(const fs::path &fresh, const fs::path &saved) {
  std::set<std::string> freshNames, savedNames;
  for (const auto &f : vectorFiles(fresh)) freshNames.insert(f.filename().string());
  for (const auto &f : vectorFiles(saved)) savedNames.insert(f.filename().string());
  int failed = 0;
  for (const auto &n : freshNames)
    if (!savedNames.count(n)) {
      std::printf("FAIL %s: generated but not checked in\n", n.c_str());
      ++failed;
    }
  for (const auto &n : savedNames) {
    if (!freshNames.count(n)) {
      std::printf("FAIL %s: checked in but no longer generated\n", n.c_str());
      ++failed;
      continue;
    }
    const std::string d = difference(fa_json::parse(readFile(fresh / n)), fa_json::parse(readFile(saved / n)), "$");
    if (!d.empty()) {
      std::printf("FAIL %s: %s\n", n.c_str(), d.c_str());
      ++failed;
    } else {
      std::printf("SAME %s\n", n.c_str());
    }
  }
  if (failed)
    std::printf("the checked-in vectors are stale: build the target update_binding_vectors and commit "
                "bindings/testdata\n");
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char **argv) {
  try {
    if (argc == 3 && std::string(argv[1]) == "run") return run(argv[2]);
    if (argc == 4 && std::string(argv[1]) == "compare") return compare(argv[2], argv[3]);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "check_vectors: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s run DIR | compare FRESH_DIR SAVED_DIR\n", argv[0]);
  return 2;
}
