// safetensors writer (F32, I64) and reader (F32, F16, BF16, I64). Every header field is checked
// before it is used, and the tensors must tile the data section exactly, so a damaged or foreign
// file gives one clear error, never a bad read or shifted values; only regular files are read,
// never more than their size.
#include "core/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/io/atomic_file.h"

namespace shardlab {
namespace {

// Tensor bytes are copied with memcpy, which is only right where the host order is the
// file's order.
static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swaps here");

// The reference implementation's limit; real headers are a few MB at most, and a huge
// length is far more likely garbage than a header.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

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

  // Streamed through the one atomic writer: the old file stays whole until the new
  // one is complete on disk, and no checkpoint-sized copy is built in memory.
  AtomicFile out(path);
  bool ok = out.write(len, 8) && out.write(text.data(), text.size());
  for (size_t i = 0; ok && i < tensors.size(); ++i) {
    const auto& d = tensors[i].data;
    if (tensors[i].int64) {
      // Converted a chunk at a time, so the I64 copy stays small.
      int64_t ints[4096];
      for (size_t k = 0; ok && k < d.size(); k += std::size(ints)) {
        const size_t n = std::min(std::size(ints), d.size() - k);
        for (size_t j = 0; j < n; ++j) ints[j] = static_cast<int64_t>(d[k + j]);
        ok = out.write(ints, n * sizeof(int64_t));
      }
    } else {
      ok = out.write(d.data(), d.size() * sizeof(float));
    }
  }
  if (!ok || !out.commit()) cannot_write(path, out.reason());
}

namespace {

// Owns a descriptor: closed once, whatever throws.
struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void not_regular(const std::string& path, mode_t mode) {
  const std::string kind =
      S_ISDIR(mode) ? std::strerror(EISDIR) : std::string("it is ") + file_kind(mode);
  throw SafetensorsError("cannot read '" + path + "': " + kind +
                         ", not a regular file (valid: a safetensors file)");
}

// Opens `path` for reading only if it is a regular file; a directory, device,
// FIFO or socket is refused before a byte is read. O_NONBLOCK: opening a FIFO
// must not wait for a writer (fstat then refuses it).
Fd open_regular(const std::string& path, struct stat& st) {
  // stat first, so a device is refused without even being opened (opening some
  // has side effects); fstat below is the check that counts.
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (f.fd < 0) throw SafetensorsError("cannot open '" + path + "': " + std::strerror(errno));
  if (::fstat(f.fd, &st) != 0)
    throw SafetensorsError("cannot read '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
  return f;
}

// Reads exactly `n` bytes; a file that ends early (it shrank since fstat) is an error.
void read_exact(const Fd& f, void* dst, uint64_t n, const std::string& path, const char* what) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::read(f.fd, p, static_cast<size_t>(std::min<uint64_t>(n, 1u << 30)));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw SafetensorsError("cannot read '" + path + "': " + std::strerror(errno));
    if (got == 0)
      bad_file(path, std::string("the file ended inside the ") + what +
                         " (did it change while being read?)");
    p += got;
    n -= static_cast<uint64_t>(got);
  }
}

std::string range(uint64_t begin, uint64_t end) {
  // Appended, not "[" + ...: GCC 12 warns (-Wrestrict) on prepending to a temporary.
  std::string s = "[";
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  s += ")";
  return s;
}

std::string bytes_word(uint64_t n) {
  return std::to_string(n) + (n == 1 ? " byte" : " bytes");
}

// As the reference implementation demands: sorted by offsets, the tensors cover the
// data section exactly, each starting where the one before ended. A gap, an overlap
// or bytes after the last tensor mean the header does not describe this data (most
// often a header length that is off, which shifts every tensor).
void check_tiling(const std::string& path, const std::vector<Entry>& entries, uint64_t data_size) {
  const char* hint = " (tensors must cover the data section exactly; wrong header length?)";
  uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin > at)
      bad_file(path,
               "bytes " + range(at, e.begin) + " of the data section belong to no tensor (" +
                   (prev ? "between '" + prev->name + "' " + range(prev->begin, prev->end) +
                               " and '" + e.name + "' " + range(e.begin, e.end)
                         : "before the first tensor '" + e.name + "' " + range(e.begin, e.end)) +
                   ")" + hint);
    if (e.begin < at)
      bad_file(path, "tensors '" + prev->name + "' " + range(prev->begin, prev->end) + " and '" +
                         e.name + "' " + range(e.begin, e.end) + " overlap in the data section");
    at = e.end;
    prev = &e;
  }
  if (at != data_size)
    bad_file(path, "the data section has " + bytes_word(data_size - at) + " " +
                       range(at, data_size) + " after " +
                       (prev ? "the last tensor '" + prev->name + "'" : "an empty header") + hint);
}

// Reads one tensor's bytes (the file position is at its start) into `t`.
void read_tensor(const Fd& f, const std::string& path, const Entry& e, NamedTensor& t) {
  const size_t elem = dtype_size(e.dtype);
  const size_t n = (e.end - e.begin) / elem;
  t.data.resize(n);
  const std::string what = "tensor '" + e.name + "'";
  if (e.dtype == "F32") {
    read_exact(f, t.data.data(), n * sizeof(float), path, what.c_str());
    return;
  }
  // Other dtypes are widened a chunk at a time, so no second full-size buffer.
  unsigned char chunk[1 << 15];
  const size_t per_chunk = sizeof chunk / elem;
  t.int64 = e.dtype == "I64";
  const bool bf16 = e.dtype == "BF16";
  for (size_t k = 0; k < n; k += per_chunk) {
    const size_t m = std::min(per_chunk, n - k);
    read_exact(f, chunk, m * elem, path, what.c_str());
    for (size_t i = 0; i < m; ++i) {
      if (t.int64) {
        int64_t v;
        std::memcpy(&v, chunk + 8 * i, 8);
        if (v > kMaxExactInt || v < -kMaxExactInt)
          bad_file(path, "tensor '" + e.name + "' holds I64 value " + std::to_string(v) +
                             " at index " + std::to_string(k + i) +
                             ", beyond what Shardlab keeps exactly (±2^24)");
        t.data[k + i] = static_cast<float>(v);
      } else {
        uint16_t h;
        std::memcpy(&h, chunk + 2 * i, 2);
        t.data[k + i] = bf16 ? bf16_to_float(h) : f16_to_float(h);
      }
    }
  }
}

// An open file whose header has been read and checked against its size: the
// tensors in offset order (so reading them in turn reads the data front to back).
struct Parsed {
  Fd f;
  std::vector<Entry> entries;
};

Parsed parse_header(const std::string& path, std::map<std::string, std::string>& metadata) {
  metadata.clear();
  // The size comes from fstat and every read is bounded by it: the header length
  // first, then the header, then (only once the header is found consistent with
  // that size) exactly the data section.
  struct stat st {};
  Parsed p{open_regular(path, st), {}};
  const Fd& f = p.f;
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8)
    bad_file(path, "only " + bytes_word(file_size) +
                       ", too short for the 8-byte header length (truncated file?)");
  unsigned char len[8];
  read_exact(f, len, 8, path, "header length");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(len[i]) << (8 * i);
  if (header_len > file_size - 8)
    bad_file(path, "header length " + std::to_string(header_len) + " runs past the end of the " +
                       std::to_string(file_size) + "-byte file (truncated or not safetensors?)");
  // The smallest header is "{}": a length below 2 (a file of zeros, say) is not one.
  if (header_len < 2)
    bad_file(path, "header length " + std::to_string(header_len) +
                       " (valid: at least 2, the bytes of a JSON object; is this a safetensors "
                       "file?)");
  if (header_len > kMaxHeaderBytes)
    bad_file(path, "header length " + std::to_string(header_len) +
                       " is over the 100 MiB limit (not a safetensors file?)");

  std::string text(static_cast<size_t>(header_len), '\0');
  read_exact(f, text.data(), header_len, path, "header");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string msg = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; the rest says where and why.
    if (auto pos = msg.find("] "); msg.rfind("[json.exception", 0) == 0 && pos != std::string::npos)
      msg = msg.substr(pos + 2);
    bad_file(path, "header is not valid JSON: " + msg);
  }
  if (!header.is_object()) bad_file(path, "header is not a JSON object");

  const uint64_t data_size = file_size - 8 - header_len;
  std::vector<Entry>& entries = p.entries;
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
  check_tiling(path, entries, data_size);
  return p;
}

std::vector<TensorHeader> headers_of(const std::vector<Entry>& entries) {
  std::vector<TensorHeader> out;
  out.reserve(entries.size());
  for (const Entry& e : entries) out.push_back({e.name, e.dtype, e.shape});
  return out;
}

}  // namespace

size_t TensorHeader::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);  // the reader checked it fits
  return n;
}

std::vector<NamedTensor> load_safetensors(const std::string& path,
                                          std::map<std::string, std::string>& metadata,
                                          const HeaderCheck& check) {
  const Parsed p = parse_header(path, metadata);
  if (check) check(headers_of(p.entries), metadata);
  // Tiled: reading the tensors in offset order reads the data section front to back.
  std::vector<NamedTensor> out;
  out.reserve(p.entries.size());
  for (const Entry& e : p.entries) {
    NamedTensor t;
    t.name = e.name;
    t.shape = e.shape;
    read_tensor(p.f, path, e, t);
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<NamedTensor> load_safetensors(const std::string& path,
                                          std::map<std::string, std::string>& metadata) {
  return load_safetensors(path, metadata, nullptr);
}

std::vector<TensorHeader> read_safetensors_header(const std::string& path,
                                                  std::map<std::string, std::string>& metadata) {
  return headers_of(parse_header(path, metadata).entries);
}

std::string find_nonfinite(const std::vector<NamedTensor>& tensors) {
  for (const NamedTensor& t : tensors) {
    size_t count = 0, first = 0;
    for (size_t i = 0; i < t.data.size(); ++i)
      if (!std::isfinite(t.data[i]) && count++ == 0) first = i;
    if (count == 0) continue;
    const float v = t.data[first];
    const std::string what = std::isnan(v) ? "NaN" : (v > 0 ? "+Inf" : "-Inf");
    return "tensor '" + t.name + "' holds " + std::to_string(count) + " non-finite value" +
           (count == 1 ? "" : "s") + " of " + std::to_string(t.data.size()) + ", the first " +
           what + " at index " + std::to_string(first);
  }
  return {};
}

std::vector<NamedTensor> load_safetensors(const std::string& path) {
  std::map<std::string, std::string> metadata;
  return load_safetensors(path, metadata);
}

}  // namespace shardlab
