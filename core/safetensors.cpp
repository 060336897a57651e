// safetensors writer (F32, I64) and reader (F32, F16, BF16, I64). Every header field is checked
// before it is used, so a damaged or foreign file gives one clear error, never a bad read.
#include "core/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

namespace shardlab {
namespace {

// Tensor bytes are copied with memcpy, which is only right where the host order is the
// file's order.
static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swaps here");

// The reference implementation's limit; real headers are a few MB at most, and a huge
// length is far more likely garbage than a header.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw SafetensorsError("bad safetensors file '" + path + "': " + what);
}

[[noreturn]] void cannot_write(const std::string& path, const std::string& why) {
  throw SafetensorsError("cannot write '" + path + "': " + why);
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Integers a float holds exactly: an I64 beyond this would come back rounded.
constexpr int64_t kMaxExactInt = int64_t{1} << 24;

size_t dtype_size(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "I64") return 8;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: no implicit leading one, scale 2^-24; exact in float.
    const float v = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -v : v;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

// BF16 is the top half of an F32, so widening is exact.
float bf16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

std::string read_all(const std::string& path) {
  std::error_code ec;
  // fopen succeeds on a directory on Linux and only the read fails, with a vaguer message.
  if (std::filesystem::is_directory(path, ec))
    throw SafetensorsError("cannot open '" + path + "': " + std::strerror(EISDIR));
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw SafetensorsError("cannot open '" + path + "': " + std::strerror(errno));
  std::string bytes;
  char chunk[1 << 16];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof chunk, f.get())) > 0) bytes.append(chunk, got);
  if (std::ferror(f.get()))
    throw SafetensorsError("cannot read '" + path + "': " + std::strerror(errno));
  return bytes;
}

// Reads a JSON array of non-negative integers; false when `v` is anything else.
bool unsigned_list(const nlohmann::json& v, std::vector<uint64_t>& out) {
  if (!v.is_array()) return false;
  out.clear();
  for (const auto& x : v) {
    if (!x.is_number_unsigned()) return false;
    out.push_back(x.get<uint64_t>());
  }
  return true;
}

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& v,
                  uint64_t data_size) {
  const std::string what = "tensor '" + name + "'";
  if (!v.is_object()) bad_file(path, what + " is not a JSON object");
  Entry e;
  e.name = name;

  auto dtype = v.find("dtype");
  if (dtype == v.end() || !dtype->is_string()) bad_file(path, what + " has no string \"dtype\"");
  e.dtype = dtype->get<std::string>();
  const size_t elem = dtype_size(e.dtype);
  if (elem == 0)
    bad_file(path,
             what + " has unsupported dtype '" + e.dtype + "' (Shardlab reads F32, F16, BF16)");

  std::vector<uint64_t> dims;
  auto shape = v.find("shape");
  if (shape == v.end() || !unsigned_list(*shape, dims))
    bad_file(path, what + " has no \"shape\" list of non-negative integers");
  // numel * elem must not wrap, or a forged shape could pass the size check below.
  uint64_t numel = 1;
  for (uint64_t d : dims) {
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (d != 0 && numel > std::numeric_limits<uint64_t>::max() / elem / d))
      bad_file(path, what + " has a shape too large to address");
    numel *= d;
    e.shape.push_back(static_cast<int64_t>(d));
  }

  std::vector<uint64_t> offsets;
  auto off = v.find("data_offsets");
  if (off == v.end() || !unsigned_list(*off, offsets) || offsets.size() != 2)
    bad_file(path, what + " has no \"data_offsets\" pair of non-negative integers");
  e.begin = offsets[0];
  e.end = offsets[1];
  if (e.begin > e.end || e.end > data_size)
    bad_file(path, what + " has data_offsets [" + std::to_string(e.begin) + ", " +
                       std::to_string(e.end) + "] outside the data section (" +
                       std::to_string(data_size) + " bytes; truncated file?)");
  if (numel * elem != e.end - e.begin)
    bad_file(path, what + " has shape " + shape_string(e.shape) + " of " + e.dtype + " (" +
                       std::to_string(numel * elem) + " bytes) but data_offsets span " +
                       std::to_string(e.end - e.begin) + " bytes");
  return e;
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the header in the caller's order, which is also the data order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& meta = header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    if (t.name == "__metadata__") cannot_write(path, "'__metadata__' cannot name a tensor");
    if (!seen.insert(t.name).second) cannot_write(path, "duplicate tensor name '" + t.name + "'");
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0)
        cannot_write(path, "tensor '" + t.name + "' has negative shape " + shape_string(t.shape));
      numel *= d;
    }
    if (static_cast<uint64_t>(numel) != t.data.size())
      cannot_write(path, "tensor '" + t.name + "' has shape " + shape_string(t.shape) + " (" +
                             std::to_string(numel) + " elements) but " +
                             std::to_string(t.data.size()) + " values");
    if (t.int64)
      for (float v : t.data)
        if (v != std::nearbyint(v) || std::abs(v) > static_cast<float>(kMaxExactInt))
          cannot_write(path, "tensor '" + t.name + "' is I64 but holds " + std::to_string(v) +
                                 " (valid: integers within ±2^24)");
    const uint64_t bytes = t.data.size() * (t.int64 ? sizeof(int64_t) : sizeof(float));
    header[t.name] = {{"dtype", t.int64 ? "I64" : "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception&) {
    cannot_write(path, "a tensor name or metadata string is not valid UTF-8");
  }
  // Pad so the data starts 8-byte aligned, which lets readers map tensors in place.
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t{text.size()} >> (8 * i));

  // Write beside the target and rename, so a crash or a full disk never leaves a
  // half-written checkpoint under the real name.
  const std::string tmp = path + ".tmp";
  auto fail = [&](int err) {
    std::remove(tmp.c_str());
    cannot_write(path, std::strerror(err));
  };
  File f(std::fopen(tmp.c_str(), "wb"));
  if (!f) cannot_write(path, std::strerror(errno));
  errno = 0;
  bool ok = std::fwrite(len, 1, 8, f.get()) == 8 &&
            std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
  for (size_t i = 0; ok && i < tensors.size(); ++i) {
    const auto& d = tensors[i].data;
    if (tensors[i].int64) {
      std::vector<int64_t> ints(d.size());
      for (size_t k = 0; k < d.size(); ++k) ints[k] = static_cast<int64_t>(d[k]);
      ok = ints.empty() ||
           std::fwrite(ints.data(), sizeof(int64_t), ints.size(), f.get()) == ints.size();
    } else {
      ok = d.empty() || std::fwrite(d.data(), sizeof(float), d.size(), f.get()) == d.size();
    }
  }
  ok = ok && std::fflush(f.get()) == 0;
  if (!ok) fail(errno ? errno : EIO);
  if (std::fclose(f.release()) != 0) fail(errno ? errno : EIO);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(errno);
}

std::vector<NamedTensor> load_safetensors(const std::string& path,
                                          std::map<std::string, std::string>& metadata) {
  metadata.clear();
  const std::string bytes = read_all(path);
  if (bytes.size() < 8)
    bad_file(path, "only " + std::to_string(bytes.size()) +
                       " bytes, too short for the 8-byte header length (truncated file?)");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i)
    header_len |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (header_len > bytes.size() - 8)
    bad_file(path, "header length " + std::to_string(header_len) + " runs past the end of the " +
                       std::to_string(bytes.size()) + "-byte file (truncated or not safetensors?)");
  if (header_len > kMaxHeaderBytes)
    bad_file(path, "header length " + std::to_string(header_len) + " is over the 100 MiB limit");

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(std::string_view(bytes).substr(8, header_len));
  } catch (const nlohmann::json::parse_error& e) {
    std::string msg = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; the rest says where and why.
    if (auto pos = msg.find("] "); msg.rfind("[json.exception", 0) == 0 && pos != std::string::npos)
      msg = msg.substr(pos + 2);
    bad_file(path, "header is not valid JSON: " + msg);
  }
  if (!header.is_object()) bad_file(path, "header is not a JSON object");

  const char* data = bytes.data() + 8 + header_len;
  const uint64_t data_size = bytes.size() - 8 - header_len;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) bad_file(path, "\"__metadata__\" is not a JSON object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          bad_file(path, "\"__metadata__\" value for '" + mk + "' is not a string");
        metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, key, value, data_size));
  }

  // File order is the order the tensors were saved in; the JSON object order is lost.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Entry* last = nullptr;  // the non-empty tensor reaching furthest so far
  for (const Entry& e : entries) {
    if (e.begin == e.end) continue;  // an empty tensor shares no bytes with anything
    if (last && e.begin < last->end)
      bad_file(path,
               "tensors '" + last->name + "' and '" + e.name + "' overlap in the data section");
    if (!last || e.end > last->end) last = &e;
  }

  std::vector<NamedTensor> out;
  out.reserve(entries.size());
  for (const Entry& e : entries) {
    NamedTensor t;
    t.name = e.name;
    t.shape = e.shape;
    const char* src = data + e.begin;
    const size_t n = (e.end - e.begin) / dtype_size(e.dtype);
    t.data.resize(n);
    if (e.dtype == "F32") {
      // An empty vector's data() may be null, which memcpy must not get even for 0 bytes.
      if (n) std::memcpy(t.data.data(), src, n * sizeof(float));
    } else if (e.dtype == "I64") {
      t.int64 = true;
      for (size_t i = 0; i < n; ++i) {
        int64_t v;
        std::memcpy(&v, src + 8 * i, 8);
        if (v > kMaxExactInt || v < -kMaxExactInt)
          bad_file(path, "tensor '" + e.name + "' holds I64 value " + std::to_string(v) +
                             ", beyond what Shardlab keeps exactly (±2^24)");
        t.data[i] = static_cast<float>(v);
      }
    } else {
      const bool bf16 = e.dtype == "BF16";
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        t.data[i] = bf16 ? bf16_to_float(h) : f16_to_float(h);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<NamedTensor> load_safetensors(const std::string& path) {
  std::map<std::string, std::string> metadata;
  return load_safetensors(path, metadata);
}

}  // namespace shardlab
