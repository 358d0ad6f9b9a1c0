// Dataset download with libcurl: bytes stream into DIR/<name>.part while OpenSSL's EVP computes
// their MD5; only a complete file with the expected checksum is flushed, synced and renamed into
// place. Every failure removes the .part file and names what failed and the manual fallback.
#include <curl/curl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>

#include "src/data/internal.h"

namespace fs = std::filesystem;

namespace hpcnet::data {
namespace {

using MdCtx = std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)>;

MdCtx new_md5() {
  MdCtx ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_md5(), nullptr) != 1)
    throw Error("OpenSSL: cannot initialise MD5");
  return ctx;
}

std::string finish_md5(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, digest, &len) != 1) throw Error("OpenSSL: MD5 failed");
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned int i = 0; i < len; ++i) {
    s += hex[digest[i] >> 4];
    s += hex[digest[i] & 15];
  }
  return s;
}

struct Sink {
  std::FILE* file = nullptr;
  EVP_MD_CTX* md5 = nullptr;
  bool write_failed = false;
  int write_errno = 0;
};

size_t on_data(char* ptr, size_t size, size_t nmemb, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t n = size * nmemb;
  if (std::fwrite(ptr, 1, n, sink->file) != n) {
    sink->write_failed = true;
    sink->write_errno = errno;
    return 0;  // makes curl abort with CURLE_WRITE_ERROR
  }
  EVP_DigestUpdate(sink->md5, ptr, n);
  return n;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Removes the .part file unless released.
struct PartGuard {
  fs::path path;
  std::FILE* file = nullptr;
  bool keep = false;
  ~PartGuard() {
    if (file) std::fclose(file);
    if (!keep) {
      std::error_code ec;
      fs::remove(path, ec);
    }
  }
};

}  // namespace

std::string file_md5(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw InputError("md5: cannot read " + path + ": " + std::strerror(errno));
  MdCtx ctx = new_md5();
  unsigned char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) EVP_DigestUpdate(ctx.get(), buf, n);
  if (std::ferror(f.get())) throw InputError("md5: cannot read " + path);
  return finish_md5(ctx.get());
}

std::string download_cifar10(const std::string& dir, const std::string& url,
                             const std::string& expected_md5, long connect_timeout_s,
                             long stall_timeout_s) {
  const fs::path final_path = fs::path(dir) / kCifar10Archive;
  const fs::path part_path = fs::path(dir) / (std::string(kCifar10Archive) + ".part");
  const std::string by_hand = "; without network, place " + std::string(kCifar10Archive) +
                              " (from " + url + ") or its unpacked cifar-10-batches-bin/ in " + dir;
  const std::string want_md5 = detail::to_lower(expected_md5);
  std::error_code ec;
  if (fs::is_regular_file(final_path, ec) &&
      (want_md5.empty() || file_md5(final_path.string()) == want_md5))
    return final_path.string();

  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw InputError("download: cannot create folder " + dir + ": " + ec.message());

  global_init();
  PartGuard guard{part_path};
  guard.file = std::fopen(part_path.c_str(), "wb");
  if (!guard.file)
    throw InputError("download: cannot write " + part_path.string() + ": " + std::strerror(errno) +
                     by_hand);
  MdCtx md5 = new_md5();
  Sink sink{guard.file, md5.get()};

  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), &curl_easy_cleanup);
  if (!curl) throw Error("download: curl_easy_init failed");
  char errbuf[CURL_ERROR_SIZE] = {0};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, connect_timeout_s);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, stall_timeout_s);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "hpcnet");
  const CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) {
    std::string why = sink.write_failed
                          ? std::string("cannot write ") + part_path.string() + ": " +
                                std::strerror(sink.write_errno)
                          : (errbuf[0] ? std::string(errbuf) : curl_easy_strerror(rc));
    while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
    throw InputError("cannot download " + url + ": " + why + by_hand);
  }
  if (std::fflush(guard.file) != 0 || ::fsync(fileno(guard.file)) != 0)
    throw InputError("download: cannot write " + part_path.string() + ": " + std::strerror(errno) +
                     by_hand);
  std::fclose(guard.file);
  guard.file = nullptr;
  const std::string got_md5 = finish_md5(md5.get());
  if (!want_md5.empty() && got_md5 != want_md5)
    throw InputError("download of " + url + " has MD5 " + got_md5 + ", expected " + want_md5 +
                     " (corrupt or wrong file, removed)" + by_hand);
  fs::rename(part_path, final_path, ec);
  if (ec)
    throw InputError("download: cannot rename " + part_path.string() + " to " +
                     final_path.string() + ": " + ec.message() + by_hand);
  guard.keep = true;
  return final_path.string();
}

}  // namespace hpcnet::data
