// The TCP store's wire pieces (tcp_store_wire.h).
#include "core/launch/tcp_store_wire.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cstdio>
#include <cstring>

namespace shardlab::tcp_store_wire {

std::string shown(const std::string& s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 60; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  if (s.size() > 60) out += "...";
  return out + "'";
}

std::string mib_text(uint64_t bytes) {
  return bytes >= (uint64_t{1} << 20) ? std::to_string(bytes >> 20) + " MiB"
                                      : std::to_string(bytes) + " bytes";
}

void append_u64(std::string& out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);  // little-endian hosts only, like c10d itself
  out.append(b, 8);
}
void append_bytes(std::string& out, const char* p, size_t n) {
  append_u64(out, n);
  out.append(p, n);
}
void append_bytes(std::string& out, const std::string& s) {
  append_bytes(out, s.data(), s.size());
}

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
}
void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string peer_name(const sockaddr_storage& ss) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&ss), sizeof ss, host, sizeof host, serv,
                    sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return std::string(host) + ":" + serv;
}

// ---------------------------------------------------------------------------
// Parsing one request from a client's buffered bytes. Lengths are checked as soon as they are
// read, before any of the bytes they announce arrive: an absurd length is refused without
// allocating it, and the buffer only ever holds bytes the client really sent.

namespace {

class Reader {
 public:
  Reader(const char* p, size_t n) : p_(p), n_(n) {}
  size_t used() const { return pos_; }
  std::string error;

  bool raw(void* out, size_t n) {
    if (n_ - pos_ < n) return false;
    std::memcpy(out, p_ + pos_, n);
    pos_ += n;
    return true;
  }
  // false: need more bytes, or bad (error set).
  bool str(std::string& out, const char* what) {
    uint64_t len = 0;
    if (!raw(&len, 8)) return false;
    if (len > kMaxString) {
      error =
          std::string(what) + " length " + std::to_string(len) + " exceeds " + mib_text(kMaxString);
      return false;
    }
    if (n_ - pos_ < len) return false;
    out.assign(p_ + pos_, len);
    pos_ += len;
    return true;
  }

 private:
  const char* p_;
  size_t n_;
  size_t pos_ = 0;
};

}  // namespace

Parsed parse(const char* p, size_t n, Request& req, size_t& used, std::string& error) {
  Reader r(p, n);
  const auto result = [&](bool ok) {
    if (!r.error.empty()) {
      error = r.error;
      return Parsed::bad;
    }
    if (!ok) return Parsed::need_more;
    used = r.used();
    return Parsed::complete;
  };
  uint8_t q = 0;
  if (!r.raw(&q, 1)) return Parsed::need_more;
  req = Request{};
  req.query = static_cast<Query>(q);
  switch (req.query) {
    case Query::set:
      return result(r.str(req.key, "key") && r.str(req.a, "value"));
    case Query::compare_set:
      return result(r.str(req.key, "key") && r.str(req.a, "expected value") &&
                    r.str(req.b, "desired value"));
    case Query::get:
    case Query::delete_key:
      return result(r.str(req.key, "key"));
    case Query::add:
      return result(r.str(req.key, "key") && r.raw(&req.delta, 8));
    case Query::get_num_keys:
      return result(true);
    case Query::check:
    case Query::wait: {
      uint64_t count = 0;
      if (!r.raw(&count, 8)) return Parsed::need_more;
      if (count > kMaxKeys) {
        error = "asks for " + std::to_string(count) + " keys at once (at most " +
                std::to_string(kMaxKeys) + ")";
        return Parsed::bad;
      }
      for (uint64_t i = 0; i < count; ++i) {
        req.keys.emplace_back();
        if (!r.str(req.keys.back(), "key")) return result(false);
      }
      return result(true);
    }
    case Query::watch_key:
      error = "sent WATCH_KEY (c10d's callback client), which this server does not serve";
      return Parsed::bad;
  }
  error = "sent an unknown query type " + std::to_string(q);
  return Parsed::bad;
}

}  // namespace shardlab::tcp_store_wire
