// Pieces of the TCP store's wire format shared by its server
// (tcp_store_server.cpp) and client (tcp_store_client.cpp): encoding, socket
// options, and parsing one request from a client's buffered bytes. Not for use
// outside core/launch/tcp_store_*.cpp; the format itself is in tcp_store.h.
#pragma once
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/launch/tcp_store.h"

namespace shardlab::tcp_store_wire {

// Keys come from the network: shown printable and short in log lines and errors.
std::string shown(const std::string& s);
std::string mib_text(uint64_t bytes);  // "3 MiB", "512 bytes"

// Little-endian, as c10d's own.
void append_u64(std::string& out, uint64_t v);
void append_bytes(std::string& out, const char* p, size_t n);  // length, then the bytes
void append_bytes(std::string& out, const std::string& s);

void set_nonblocking(int fd);
void set_nodelay(int fd);
std::string peer_name(const sockaddr_storage& ss);  // "127.0.0.1:5432"

// One request, as parsed from a client's bytes.
struct Request {
  Query query{};
  std::string key, a, b;  // a: value / expected; b: desired
  std::vector<std::string> keys;
  int64_t delta = 0;
};

enum class Parsed { complete, need_more, bad };

// Parses one request from the n bytes at p. Lengths are checked as soon as they
// are read, before any of the bytes they announce arrive: an absurd length is
// refused without allocating it. complete: `req` holds it and `used` its size;
// bad: `error` says why.
Parsed parse(const char* p, size_t n, Request& req, size_t& used, std::string& error);

}  // namespace shardlab::tcp_store_wire
