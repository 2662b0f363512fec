// Blocking calls on libcurl: each call is a fresh easy handle run by curl_easy_perform; the
// share handle keeps the connection cache between them, so keep-alive works across calls.
#include "client/caller.hpp"

#include "client/transfer.hpp"

#include <curl/curl.h>
#include <memory>

namespace outboxd::client {
namespace {

struct easy_deleter {
  void operator()(CURL* easy) const { curl_easy_cleanup(easy); }
};

} // namespace

caller::caller() {
  init_curl_once();
  CURLSH* share = curl_share_init();
  // One thread uses the share (the caller is not shared), so no lock callbacks are needed.
  curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
  curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  share_ = share;
}

caller::~caller() {
  curl_share_cleanup(static_cast<CURLSH*>(share_));
}

call_result caller::call(const call_request& request) {
  transfer t(request);
  std::unique_ptr<CURL, easy_deleter> easy(curl_easy_init());
  if (!easy) {
    call_result out;
    out.error = "transfer failed: cannot create a curl handle";
    return out;
  }
  if (!t.configure(easy.get()))
    return t.finish(CURLE_OK);
  curl_easy_setopt(easy.get(), CURLOPT_SHARE, share_);
  return t.finish(curl_easy_perform(easy.get()));
}

} // namespace outboxd::client
