#include "engine/message.h"

#include <cstring>
#include <sstream>

namespace hvdlite {

bool Response::matches(const Request& r) const {
  return ok() && op == r.op && dtype == r.dtype && reduce_op == r.reduce_op &&
         compression == r.compression && prescale == r.prescale && postscale == r.postscale &&
         root == r.root && nccl == r.nccl && shape == r.shape;
}

int64_t num_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

namespace {

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  template <typename T> void pod(T v) {
    size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void ints(const std::vector<int64_t>& v) {
    pod<uint32_t>(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) pod(x);
  }

 private:
  std::vector<uint8_t>& out_;
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool done() const { return p_ >= end_; }
  template <typename T> T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string str() {
    uint32_t n = pod<uint32_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::vector<int64_t> ints() {
    uint32_t n = pod<uint32_t>();
    std::vector<int64_t> v(n);
    for (auto& x : v) x = pod<int64_t>();
    return v;
  }

 private:
  void need(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) throw Error(Status::Internal, "truncated control message");
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

void write_spec(Writer& w, const TensorSpec& s) {
  w.str(s.name);
  w.pod(s.op); w.pod(s.dtype); w.pod(s.reduce_op); w.pod(s.compression);
  w.pod(s.prescale); w.pod(s.postscale); w.pod(s.root); w.pod(s.nccl);
  w.ints(s.shape);
}

void read_spec(Reader& rd, TensorSpec& s) {
  s.name = rd.str();
  s.op = rd.pod<OpType>(); s.dtype = rd.pod<DataType>(); s.reduce_op = rd.pod<ReduceOp>();
  s.compression = rd.pod<Compression>();
  s.prescale = rd.pod<double>(); s.postscale = rd.pod<double>(); s.root = rd.pod<int32_t>();
  s.nccl = rd.pod<bool>();
  s.shape = rd.ints();
}

}  // namespace

void encode_requests(const std::vector<Request>& requests, std::vector<uint8_t>& out) {
  Writer w(out);
  for (const Request& r : requests) {
    write_spec(w, r);
    w.pod(r.process_set); w.pod(r.rank); w.pod(r.join_round);
  }
}

std::vector<Request> decode_requests(const uint8_t* data, size_t size) {
  Reader rd(data, size);
  std::vector<Request> out;
  while (!rd.done()) {
    Request r;
    read_spec(rd, r);
    r.process_set = rd.pod<int32_t>(); r.rank = rd.pod<int32_t>(); r.join_round = rd.pod<int64_t>();
    out.push_back(std::move(r));
  }
  return out;
}

void encode_responses(const std::vector<Response>& responses, std::vector<uint8_t>& out) {
  Writer w(out);
  for (const Response& r : responses) {
    write_spec(w, r);
    w.pod(r.last_joined_rank); w.ints(r.first_dims);
    w.pod(r.error_status); w.str(r.error);
  }
}

std::vector<Response> decode_responses(const uint8_t* data, size_t size) {
  Reader rd(data, size);
  std::vector<Response> out;
  while (!rd.done()) {
    Response r;
    read_spec(rd, r);
    r.last_joined_rank = rd.pod<int32_t>(); r.first_dims = rd.ints();
    r.error_status = rd.pod<Status>(); r.error = rd.str();
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace hvdlite
