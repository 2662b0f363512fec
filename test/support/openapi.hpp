// docs/openapi.json as tests use it: the operations it documents, and a check of a real answer
// against the response schema it documents for that operation and status.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace outboxd::test {

/// One documented operation: an upper-case method and a path template such as
/// "/api/orders/{id}".
struct openapi_operation {
  std::string method;
  std::string path;

  friend bool operator==(const openapi_operation&, const openapi_operation&) = default;
  friend auto operator<=>(const openapi_operation&, const openapi_operation&) = default;
};

/// A loaded OpenAPI 3.0 document. Response schemas are checked with RapidJSON's draft-04
/// validator: `#/components/schemas/...` references resolve against the document's components,
/// and `nullable: true` becomes a type union with "null". Thread-safe.
class openapi_document {
public:
  /// Reads and parses `file`; throws std::runtime_error naming the file when it cannot be read
  /// or is not a JSON object with `paths`.
  explicit openapi_document(const std::string& file);
  ~openapi_document();
  openapi_document(const openapi_document&) = delete;
  openapi_document& operator=(const openapi_document&) = delete;

  /// Every operation under `paths`, sorted by path then method.
  std::vector<openapi_operation> operations() const;

  /// The response statuses documented for an operation ("200", "404", ...); empty when the
  /// operation is not documented.
  std::vector<std::string> statuses(std::string_view method, std::string_view path_template) const;

  /// Checks one answer: the operation exists, `status` is documented for it (exactly, as "4XX",
  /// or as "default"), and the body fits the documented content: empty when no content is
  /// documented, JSON valid against the schema for application/json, anything for other media
  /// types. When `content_type` is not empty, its media type (parameters aside) must also be
  /// documented. Returns "" when the answer fits, else readable text naming the operation, the
  /// field (a JSON pointer into the body), what was wrong and the schema rule it broke.
  std::string validate_response(std::string_view method, std::string_view path_template, int status,
                                std::string_view body, std::string_view content_type = {}) const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// docs/openapi.json of the source tree (OUTBOXD_SOURCE_DIR), loaded once.
const openapi_document& openapi();

/// The operations of docs/openapi.json (openapi().operations()).
std::vector<openapi_operation> openapi_operations();

/// openapi().validate_response(...): "" when the answer fits docs/openapi.json.
std::string validate_response(std::string_view method, std::string_view path_template, int status,
                              std::string_view body, std::string_view content_type = {});

} // namespace outboxd::test
