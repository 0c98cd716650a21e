#include "server/http_session.h"

#include <strings.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <optional>
#include <string>

#include "base/logging.h"

namespace vllm::server::http_detail {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using error_code = boost::system::error_code;

// How much is read at a time while waiting for a request, and while answering one (that
// read only watches for the client leaving); how much early (pipelined) input a session
// keeps while it answers: past that it stops reading until it is done.
constexpr size_t kReadChunk = 4 * 1024;
constexpr size_t kWatchChunk = 512;
constexpr size_t kMaxEarlyInput = 64 * 1024;
// After an error answer the rest of the client's input is read and dropped for this long
// before closing, so the client sees the answer rather than a reset.
constexpr std::chrono::seconds kLingerTime{2};
constexpr size_t kMaxLingerBytes = 16u << 20;

using Clock = std::chrono::steady_clock;

bool is_disconnect(const error_code& ec) {
  return ec == net::error::eof || ec == net::error::connection_reset ||
         ec == net::error::broken_pipe || ec == net::error::operation_aborted ||
         ec == beast::error::timeout || ec == net::ssl::error::stream_truncated;
}

template <class Stream>
class Session final : public SessionBase, public std::enable_shared_from_this<Session<Stream>> {
 public:
  template <class... Args>
  Session(std::shared_ptr<SessionContext> context, Args&&... args)
      : context_(std::move(context)),
        stream_(std::forward<Args>(args)...),
        deadline_timer_(stream_.get_executor()),
        wake_posted_(std::make_shared<std::atomic<bool>>(false)) {}

  ~Session() override {
    // The response stream (if any) goes first: that aborts its engine requests.
    response_.reset();
    std::lock_guard<std::mutex> lock(context_->mutex);
    context_->sessions.erase(this);
  }

  void start() {
    {
      std::lock_guard<std::mutex> lock(context_->mutex);
      context_->sessions.emplace(this, this->weak_from_this());
    }
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->handshake(); });
  }

  void server_stopping() override {
    net::post(stream_.get_executor(), [weak = this->weak_from_this()] {
      if (auto self = weak.lock()) {
        if (self->idle_) self->close_now();
      }
    });
  }

 private:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }
  const SessionLimits& limits() const { return context_->limits; }

  // --- connection setup and idle time ---

  void handshake() {
    if constexpr (kTls) {
      set_deadline(limits().request_timeout);
      stream_.async_handshake(net::ssl::stream_base::server,
                              [self = this->shared_from_this()](const error_code& ec) {
                                if (ec) return self->close_now();
                                self->begin_idle();
                              });
    } else {
      begin_idle();
    }
  }

  // Waits for the next request: parses what is buffered already, else reads with the idle
  // deadline (the request timeout for a connection's first request, else the keep-alive one).
  void begin_idle() {
    if (closing_) return;
    if (context_->stopping) return close_now();
    idle_ = true;
    if (buffer_.size() > 0) {
      // A pipelined request is here already; a read still outstanding from the previous
      // response is cancelled first (its completion then starts the parse).
      if (read_outstanding_) {
        cancel_to_parse_ = true;
        error_code ignored;
        tcp().socket().cancel(ignored);
        return;
      }
      return read_header();
    }
    // A large request's storage is not kept for the idle time (unless a read is writing
    // into it).
    if (!read_outstanding_ && buffer_.capacity() > kMaxEarlyInput) buffer_.shrink_to_fit();
    set_deadline(first_request_ ? limits().request_timeout : limits().keep_alive_timeout);
    if (!read_outstanding_) arm_read();
  }

  // Idle connections and requests arriving too slowly are closed at a deadline. One timer per
  // connection, re-armed lazily: a request-response cycle shorter than the timeout touches
  // no timer (it fires at the old deadline, finds a later one and waits again).
  void set_deadline(std::chrono::milliseconds timeout) {
    timed_ = true;
    deadline_ = Clock::now() + timeout;
    if (!timer_armed_ || timer_expiry_ > deadline_) arm_timer(deadline_);
  }

  void arm_timer(Clock::time_point at) {
    timer_armed_ = true;
    timer_expiry_ = at;
    const uint64_t seq = ++timer_seq_;
    deadline_timer_.expires_at(at);
    deadline_timer_.async_wait([weak = this->weak_from_this(), seq](const error_code&) {
      auto self = weak.lock();
      if (!self || seq != self->timer_seq_) return;  // re-armed meanwhile
      self->timer_armed_ = false;
      if (self->closing_ || !self->timed_) return;
      if (Clock::now() >= self->deadline_) return self->close_now();
      self->arm_timer(self->deadline_);
    });
  }

  void arm_read() {
    read_outstanding_ = true;
    stream_.async_read_some(buffer_.prepare(in_response_ ? kWatchChunk : kReadChunk),
                            [self = this->shared_from_this()](const error_code& ec, size_t n) {
                              self->on_read(ec, n);
                            });
  }

  void on_read(const error_code& ec, size_t n) {
    read_outstanding_ = false;
    if (closing_) return;
    if (cancel_to_parse_) {
      cancel_to_parse_ = false;
      if (!ec || ec == net::error::operation_aborted) {
        buffer_.commit(n);
        return read_header();
      }
    }
    if (ec) {
      if (in_response_) return client_gone(ec);
      return close_now();
    }
    buffer_.commit(n);
    if (in_response_) {
      // Early input (HTTP pipelining): keep it for the next request, keep watching.
      if (buffer_.size() < kMaxEarlyInput) arm_read();
      return;
    }
    read_header();
  }

  // --- reading a request ---

  void read_header() {
    idle_ = false;
    set_deadline(limits().request_timeout);  // for the whole request
    parser_.emplace();
    parser_->header_limit(
        static_cast<uint32_t>(std::min<size_t>(limits().max_header_bytes, UINT32_MAX)));
    parser_->body_limit(limits().max_request_bytes);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](const error_code& ec, size_t) { self->on_header(ec); });
  }

  void on_header(const error_code& ec) {
    if (ec) return fail_read(ec);
    const auto& req = parser_->get();
    size_t count = 0;
    for (auto it = req.begin(); it != req.end(); ++it) ++count;
    if (count > limits().max_header_count) {
      return write_error(431, "the request has " + std::to_string(count) + " headers; at most " +
                                  std::to_string(limits().max_header_count) + " are accepted");
    }
    auto expect = req.find(http::field::expect);
    if (expect != req.end() && beast::iequals(expect->value(), "100-continue") &&
        !parser_->is_done()) {
      // curl and others wait for this before sending a large body.
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                     req.version());
      return http::async_write(
          stream_, *cont, [self = this->shared_from_this(), cont](const error_code& ec2, size_t) {
            if (ec2) return self->close_now();
            self->read_body();
          });
    }
    read_body();
  }

  void read_body() {
    if (parser_->is_done()) return on_request();
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](const error_code& ec, size_t) {
                       if (ec) return self->fail_read(ec);
                       self->on_request();
                     });
  }

  void fail_read(const error_code& ec) {
    if (ec == http::error::body_limit) {
      return write_error(413, "the request body is too large");
    }
    if (ec == http::error::header_limit) {
      return write_error(431, "the request header is too large");
    }
    if (is_disconnect(ec) || ec == http::error::end_of_stream ||
        ec == http::error::partial_message) {
      return close_now();
    }
    write_error(400, "Invalid HTTP request received: " + ec.message());
  }

  // --- answering ---

  void on_request() {
    auto& req = parser_->get();
    request_.method = std::string(req.method_string());
    request_.target = std::string(req.target());
    request_.headers.clear();
    for (const auto& field : req) {
      request_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    request_.body = std::move(req.body());
    timed_ = false;  // answering has no deadline (as uvicorn)
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    head_ = req.method() == http::verb::head;
    parser_.reset();
    first_request_ = false;

    HttpResponse response;
    try {
      response = context_->router->handle(request_);
    } catch (const std::exception& e) {
      response = context_->router->transport_error(&request_, 500,
                                                   std::string("internal error: ") + e.what());
    }
    request_.body.clear();
    request_.body.shrink_to_fit();
    if (!response.stream) return write_whole(std::move(response));

    // A generation: keep an eye on the client while the engine works.
    in_response_ = true;
    response_ = std::move(response.stream);
    streaming_ = response_->streaming();
    if (!read_outstanding_ && buffer_.size() < kMaxEarlyInput) arm_read();
    auto gate = context_->gate;
    auto flag = wake_posted_;
    auto executor = stream_.get_executor();
    std::weak_ptr<Session> weak = this->weak_from_this();
    response_->set_wake([gate, flag, executor, weak] {
      if (flag->exchange(true)) return;  // a wake-up is on its way already
      gate->post(executor, [flag, weak] {
        flag->store(false);
        if (auto self = weak.lock()) self->pump();
      });
    });
    if (!streaming_) {
      pending_ = std::move(response);
      return pump();
    }
    stream_header_.emplace(static_cast<http::status>(response.status), version_);
    set_headers(*stream_header_, response);
    stream_header_->chunked(true);
    stream_header_->keep_alive(keep_alive_ && !context_->stopping);
    header_serializer_.emplace(*stream_header_);
    writing_ = true;
    http::async_write_header(
        stream_, *header_serializer_,
        [self = this->shared_from_this()](const error_code& ec, size_t) { self->on_written(ec); });
  }

  template <class Message>
  static void set_headers(Message& message, const HttpResponse& response) {
    if (!response.content_type.empty())
      message.set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) message.insert(name, value);
  }

  // Moves what the response stream has ready onto the socket, one write at a time.
  void pump() {
    if (!response_ || writing_ || closing_) return;
    std::string out;
    bool more = false;
    try {
      more = response_->poll(&out);
    } catch (const std::exception& e) {
      VLLM_LOG_ERROR("response failed: {}", e.what());
      if (!streaming_) {
        response_.reset();
        return write_whole(context_->router->transport_error(
            &request_, 500, std::string("internal error: ") + e.what()));
      }
      more = false;  // end the event stream where it is
    }
    if (!streaming_) {
      if (more) return;
      pending_.status = response_->status();
      if (pending_.status != 200) pending_.content_type = "application/json";
      pending_.body = std::move(out);
      response_.reset();  // in_response_ stays until the answer is written
      return write_whole(std::move(pending_));
    }
    if (!out.empty()) {
      chunk_ = std::move(out);
      writing_ = true;
      net::async_write(stream_, http::make_chunk(net::const_buffer(chunk_.data(), chunk_.size())),
                       [self = this->shared_from_this()](const error_code& ec, size_t) {
                         self->on_written(ec);
                       });
      return;
    }
    if (more) return;  // nothing yet: the next wake-up brings more
    response_.reset();
    writing_ = true;
    last_chunk_ = true;
    net::async_write(
        stream_, http::make_chunk_last(),
        [self = this->shared_from_this()](const error_code& ec, size_t) { self->on_written(ec); });
  }

  void on_written(const error_code& ec) {
    writing_ = false;
    chunk_.clear();
    if (closing_) return;
    if (ec) return client_gone(ec);
    if (!last_chunk_) return pump();
    last_chunk_ = false;
    header_serializer_.reset();
    stream_header_.reset();
    finish_response(stream_header_keep_alive());
  }

  bool stream_header_keep_alive() const { return keep_alive_ && !context_->stopping; }

  // Writes a whole answer. No deadline (as uvicorn): a slow reader holds only this answer.
  void write_whole(HttpResponse response) {
    const bool keep_alive = keep_alive_ && !context_->stopping && !linger_after_write_;
    writing_ = true;
    if (head_) {
      auto res = std::make_shared<http::response<http::empty_body>>(
          static_cast<http::status>(response.status), version_);
      set_headers(*res, response);
      res->content_length(response.body.size());
      res->keep_alive(keep_alive);
      http::async_write(
          stream_, *res,
          [self = this->shared_from_this(), res, keep_alive](const error_code& ec, size_t) {
            self->on_whole_written(ec, keep_alive);
          });
      return;
    }
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(response.status), version_);
    set_headers(*res, response);
    res->body() = std::move(response.body);
    res->keep_alive(keep_alive);
    res->prepare_payload();
    http::async_write(
        stream_, *res,
        [self = this->shared_from_this(), res, keep_alive](const error_code& ec, size_t) {
          self->on_whole_written(ec, keep_alive);
        });
  }

  void on_whole_written(const error_code& ec, bool keep_alive) {
    writing_ = false;
    if (closing_) return;
    if (ec) return close_now();
    finish_response(keep_alive);
  }

  // The answer is written. Input that came meanwhile (read while answering) is the next
  // request's.
  void finish_response(bool keep_alive) {
    in_response_ = false;
    if (linger_after_write_) return linger();
    if (!keep_alive) return close_gracefully();
    begin_idle();
  }

  // An error answer, then the connection closes (its input cannot be trusted any more).
  void write_error(int status, std::string message) {
    idle_ = false;
    linger_after_write_ = true;
    keep_alive_ = false;
    version_ = 11;
    head_ = false;
    const HttpRequest* req = nullptr;
    if (parser_ && parser_->is_header_done()) {
      request_.method = std::string(parser_->get().method_string());
      request_.target = std::string(parser_->get().target());
      request_.headers.clear();
      for (const auto& field : parser_->get()) {
        request_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
      }
      version_ = parser_->get().version();
      req = &request_;
    }
    parser_.reset();
    timed_ = false;
    tcp().expires_after(limits().request_timeout);  // the error answer, then close
    write_whole(context_->router->transport_error(req, status, std::move(message)));
  }

  // Half-closes, then reads and drops the client's remaining input for a while, so that a
  // client still sending a refused body reads the answer instead of a connection reset.
  void linger() {
    closing_ = true;
    deadline_timer_.cancel();
    error_code ignored;
    tcp().socket().shutdown(net::ip::tcp::socket::shutdown_send, ignored);
    tcp().expires_after(kLingerTime);
    drain();
  }

  void drain() {
    buffer_.clear();
    tcp().async_read_some(buffer_.prepare(kReadChunk),
                          [self = this->shared_from_this()](const error_code& ec, size_t n) {
                            self->lingered_ += n;
                            if (ec || self->lingered_ > kMaxLingerBytes) {
                              error_code ignored;
                              self->tcp().socket().close(ignored);
                              return;
                            }
                            self->drain();
                          });
  }

  // The client went away while its response was produced: drop the response (which aborts
  // its engine requests) and the connection.
  void client_gone(const error_code& ec) {
    if (response_) VLLM_LOG_DEBUG("client disconnected ({}); aborting its request", ec.message());
    response_.reset();
    close_now();
  }

  void close_gracefully() {
    if constexpr (kTls) {
      if (!read_outstanding_ && !writing_) {
        closing_ = true;
        deadline_timer_.cancel();
        tcp().expires_after(kLingerTime);
        stream_.async_shutdown([self = this->shared_from_this()](const error_code&) {
          error_code ignored;
          self->tcp().socket().close(ignored);
        });
        return;
      }
    } else {
      error_code ignored;
      tcp().socket().shutdown(net::ip::tcp::socket::shutdown_send, ignored);
    }
    close_now();
  }

  void close_now() {
    if (closing_ && !tcp().socket().is_open()) return;
    closing_ = true;
    idle_ = false;
    response_.reset();
    deadline_timer_.cancel();
    error_code ignored;
    tcp().socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
    tcp().socket().close(ignored);
  }

  std::shared_ptr<SessionContext> context_;
  Stream stream_;
  beast::flat_buffer buffer_;
  net::steady_timer deadline_timer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest request_;
  unsigned version_ = 11;
  bool keep_alive_ = false;
  bool head_ = false;
  bool first_request_ = true;
  bool idle_ = false;
  bool closing_ = false;
  bool read_outstanding_ = false;
  bool cancel_to_parse_ = false;
  bool timed_ = false;  // the current phase has a deadline (handshake, idle, reading)
  Clock::time_point deadline_;
  bool timer_armed_ = false;
  Clock::time_point timer_expiry_;
  uint64_t timer_seq_ = 0;
  bool in_response_ = false;  // from the request's arrival until its answer is written
  bool writing_ = false;
  bool streaming_ = false;
  bool last_chunk_ = false;
  bool linger_after_write_ = false;
  size_t lingered_ = 0;
  std::unique_ptr<ResponseStream> response_;
  HttpResponse pending_;  // a non-streaming answer's status line and headers
  std::optional<http::response<http::empty_body>> stream_header_;
  std::optional<http::response_serializer<http::empty_body>> header_serializer_;
  std::string chunk_;
  std::shared_ptr<std::atomic<bool>> wake_posted_;
};

}  // namespace

void WakeGate::post(const boost::asio::any_io_executor& executor, std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!closed_) net::post(executor, std::move(fn));
}

void WakeGate::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
}

void start_session(net::ip::tcp::socket socket, std::shared_ptr<SessionContext> context) {
  if (context->tls != nullptr) {
    net::ssl::context& tls = *context->tls;
    auto session = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
        std::move(context), beast::tcp_stream(std::move(socket)), tls);
    session->start();
  } else {
    auto session =
        std::make_shared<Session<beast::tcp_stream>>(std::move(context), std::move(socket));
    session->start();
  }
}

void stop_sessions(SessionContext& context) {
  context.stopping = true;
  std::vector<std::shared_ptr<SessionBase>> live;
  {
    std::lock_guard<std::mutex> lock(context.mutex);
    for (auto& [raw, weak] : context.sessions) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->server_stopping();
}

}  // namespace vllm::server::http_detail
