#include "server/cors.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

namespace vllm::server {
namespace {

// Starlette's expansion of "*" methods and its always-allowed request headers.
const std::vector<std::string> kAllMethods = {"DELETE", "GET",  "HEAD", "OPTIONS",
                                              "PATCH",  "POST", "PUT"};
const std::vector<std::string> kSafelistedHeaders = {"Accept", "Accept-Language",
                                                     "Content-Language", "Content-Type"};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

bool contains(const std::vector<std::string>& list, std::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

std::string join(const std::vector<std::string>& list) {
  std::string out;
  for (const std::string& s : list) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

}  // namespace

Expected<std::vector<std::string>> parse_cors_list(std::string_view flag, std::string_view value) {
  nlohmann::json parsed = nlohmann::json::parse(value, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_array()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{} takes a JSON list of strings, e.g. '[\"http://localhost:3000\"]'; got "
                      "'{}'",
                      flag, value);
  }
  std::vector<std::string> out;
  for (const auto& item : parsed) {
    if (!item.is_string()) {
      return make_error(ErrorCode::kInvalidArgument, "{}: every entry must be a string; got {}",
                        flag, item.dump());
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

CorsPolicy::CorsPolicy(CorsOptions options) : options_(std::move(options)) {
  all_origins_ = contains(options_.allowed_origins, "*");
  all_headers_ = contains(options_.allowed_headers, "*");
  methods_ = contains(options_.allowed_methods, "*") ? kAllMethods : options_.allowed_methods;
  std::set<std::string> headers(kSafelistedHeaders.begin(), kSafelistedHeaders.end());
  headers.insert(options_.allowed_headers.begin(), options_.allowed_headers.end());
  std::vector<std::string> sorted(headers.begin(), headers.end());
  allow_headers_value_ = join(sorted);
  for (const std::string& h : sorted) lower_headers_.push_back(lower(h));
}

bool CorsPolicy::origin_allowed(std::string_view origin) const {
  return all_origins_ || contains(options_.allowed_origins, origin);
}

CorsPolicy::Preflight CorsPolicy::preflight(std::string_view origin,
                                            std::string_view requested_method,
                                            const std::string* requested_headers) const {
  Preflight out;
  // The origin is named explicitly unless any origin may call without credentials.
  const bool explicit_origin = !all_origins_ || options_.allow_credentials;
  if (explicit_origin) {
    out.headers.emplace_back("Vary", "Origin");
  } else {
    out.headers.emplace_back("Access-Control-Allow-Origin", "*");
  }
  out.headers.emplace_back("Access-Control-Allow-Methods", join(methods_));
  out.headers.emplace_back("Access-Control-Max-Age", "600");
  if (!all_headers_) out.headers.emplace_back("Access-Control-Allow-Headers", allow_headers_value_);
  if (options_.allow_credentials) {
    out.headers.emplace_back("Access-Control-Allow-Credentials", "true");
  }

  std::vector<std::string> failures;
  if (origin_allowed(origin)) {
    if (explicit_origin)
      out.headers.emplace_back("Access-Control-Allow-Origin", std::string(origin));
  } else {
    failures.push_back("origin");
  }
  if (!contains(methods_, requested_method)) failures.push_back("method");
  if (requested_headers != nullptr) {
    if (all_headers_) {
      // Any header is allowed: mirror what was asked for.
      out.headers.emplace_back("Access-Control-Allow-Headers", *requested_headers);
    } else {
      std::string_view rest = *requested_headers;
      while (true) {
        const size_t comma = rest.find(',');
        const std::string name = lower(trim(rest.substr(0, comma)));
        if (!contains(lower_headers_, name)) {
          failures.push_back("headers");
          break;
        }
        if (comma == std::string_view::npos) break;
        rest = rest.substr(comma + 1);
      }
    }
  }
  if (failures.empty()) {
    out.body = "OK";
  } else {
    out.status = 400;
    out.body = "Disallowed CORS " + join(failures);
  }
  return out;
}

HeaderList CorsPolicy::simple_headers(std::string_view origin, bool has_cookie) const {
  HeaderList out;
  if (options_.allow_credentials) out.emplace_back("Access-Control-Allow-Credentials", "true");
  if ((all_origins_ && has_cookie) || (!all_origins_ && origin_allowed(origin))) {
    out.emplace_back("Access-Control-Allow-Origin", std::string(origin));
    out.emplace_back("Vary", "Origin");
  } else if (all_origins_) {
    out.emplace_back("Access-Control-Allow-Origin", "*");
  }
  return out;
}

}  // namespace vllm::server
