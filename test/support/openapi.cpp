// docs/openapi.json for tests: response schemas become draft-04 schema documents for RapidJSON's
// validator, and a violation is explained in words rather than as a pair of JSON pointers.
// OpenAPI patterns are ECMA-262 regular expressions (\S, [!-~]...), which std::regex understands
// and RapidJSON's small built-in engine does not.
#define RAPIDJSON_SCHEMA_USE_INTERNALREGEX 0

#include "test/support/openapi.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/pointer.h>
#include <rapidjson/schema.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <sstream>
#include <stdexcept>

namespace outboxd::test {
namespace {

using rapidjson::Document;
using rapidjson::Value;

constexpr std::array<std::string_view, 8> http_methods = {"get",     "put",  "post",  "delete",
                                                          "options", "head", "patch", "trace"};
constexpr std::size_t shown_chars = 120;
// oneOf inside oneOf is explained this deep, then only named.
constexpr int max_explain_depth = 3;

std::string_view view(const Value& v) {
  return {v.GetString(), v.GetStringLength()};
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string upper(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return out;
}

std::string show(const Value* v) {
  if (v == nullptr)
    return "(nothing)";
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  v->Accept(writer);
  std::string text(buffer.GetString(), buffer.GetSize());
  return text.size() > shown_chars ? text.substr(0, shown_chars) + "..." : text;
}

const char* type_name(const Value* v) {
  if (v == nullptr)
    return "absent";
  if (v->IsNull())
    return "null";
  if (v->IsBool())
    return "a boolean";
  if (v->IsObject())
    return "an object";
  if (v->IsArray())
    return "an array";
  if (v->IsString())
    return "a string";
  if (v->IsInt64() || v->IsUint64())
    return "an integer";
  return "a number";
}

const Value* member(const Value& object, std::string_view name) {
  if (!object.IsObject())
    return nullptr;
  auto it = object.FindMember(Value(rapidjson::StringRef(name.data(), name.size())));
  return it == object.MemberEnd() ? nullptr : &it->value;
}

std::string names_of(const Value& object) {
  std::string out;
  if (object.IsObject())
    for (const auto& m : object.GetObject())
      out += (out.empty() ? "" : ", ") + std::string(view(m.name));
  return out;
}

/// Rewrites OpenAPI's `nullable: true` as draft-04 understands it, in place and recursively:
/// `"type": "string"` becomes `["string", "null"]` (and null joins an enum), a schema without a
/// type becomes `anyOf: [schema, {"type": "null"}]`.
void convert_nullable(Value& v, Document::AllocatorType& a) {
  if (v.IsArray()) {
    for (auto& e : v.GetArray())
      convert_nullable(e, a);
    return;
  }
  if (!v.IsObject())
    return;
  for (auto& m : v.GetObject()) {
    auto name = view(m.name);
    // Literal values, not schemas.
    if (name == "enum" || name == "example" || name == "default")
      continue;
    convert_nullable(m.value, a);
  }
  auto flag = v.FindMember("nullable");
  // An object here is a property that happens to be called "nullable", not the keyword.
  if (flag == v.MemberEnd() || !flag->value.IsBool())
    return;
  bool nullable = flag->value.GetBool();
  v.RemoveMember(flag);
  if (!nullable)
    return;
  auto type = v.FindMember("type");
  if (type != v.MemberEnd() && type->value.IsString()) {
    Value types(rapidjson::kArrayType);
    types.PushBack(Value(type->value, a), a);
    types.PushBack("null", a);
    type->value = types;
    auto values = v.FindMember("enum");
    if (values != v.MemberEnd() && values->value.IsArray() &&
        std::none_of(values->value.Begin(), values->value.End(),
                     [](const Value& e) { return e.IsNull(); }))
      values->value.PushBack(Value(), a);
    return;
  }
  Value inner(v, a);
  Value null_type(rapidjson::kObjectType);
  null_type.AddMember("type", "null", a);
  Value alternatives(rapidjson::kArrayType);
  alternatives.PushBack(inner, a);
  alternatives.PushBack(null_type, a);
  v.SetObject();
  v.AddMember("anyOf", alternatives, a);
}

/// A schema document whose root is `{"$ref": <target>, "response": <schema>, "components":
/// {"schemas": ...}}`, so that `#/components/schemas/...` references resolve; the source stays
/// alive because the explanations read rules from it.
struct compiled_schema {
  Document source;
  std::unique_ptr<rapidjson::SchemaDocument> schema;
};

std::unique_ptr<compiled_schema> compile(const Value& source_root, std::string_view target) {
  auto c = std::make_unique<compiled_schema>();
  auto& a = c->source.GetAllocator();
  c->source.CopyFrom(source_root, a);
  c->source.RemoveMember("$ref");
  c->source.AddMember("$ref",
                      Value(target.data(), static_cast<rapidjson::SizeType>(target.size()), a), a);
  c->schema = std::make_unique<rapidjson::SchemaDocument>(c->source);
  return c;
}

std::unique_ptr<compiled_schema> compile_response(const Value& schema, const Value* schemas) {
  Document root;
  auto& a = root.GetAllocator();
  root.SetObject();
  Value response(schema, a);
  convert_nullable(response, a);
  root.AddMember("response", response, a);
  Value components(rapidjson::kObjectType);
  Value converted(rapidjson::kObjectType);
  if (schemas != nullptr) {
    converted.CopyFrom(*schemas, a);
    convert_nullable(converted, a);
  }
  components.AddMember("schemas", converted, a);
  root.AddMember("components", components, a);
  return compile(root, "#/response");
}

std::string stringify(const rapidjson::Pointer& p) {
  rapidjson::StringBuffer buffer;
  p.Stringify(buffer);
  return {buffer.GetString(), buffer.GetSize()};
}

std::optional<std::string> first_violation(const compiled_schema& c, const Value& instance,
                                           int depth);

/// Why `value` fails a oneOf/anyOf/allOf: each alternative's own first violation.
std::string explain_alternatives(const compiled_schema& c, const std::string& schema_pointer,
                                 std::string_view keyword, const Value& alternatives,
                                 const Value* value, int depth) {
  if (value == nullptr || !alternatives.IsArray())
    return {};
  std::string out;
  int matching = 0;
  for (rapidjson::SizeType i = 0; i < alternatives.Size(); ++i) {
    auto alternative = compile(c.source, fmt::format("#{}/{}/{}", schema_pointer, keyword, i));
    auto why = depth < max_explain_depth ? first_violation(*alternative, *value, depth + 1)
                                         : std::optional<std::string>("does not match");
    if (why)
      out += fmt::format("; alternative {}: {}", i, *why);
    else
      ++matching;
  }
  if (keyword == "allOf")
    return out.empty() ? std::string() : out.substr(2); // only the parts it breaks matter
  if (keyword == "oneOf" && matching > 1)
    return fmt::format("; it matches {} alternatives, oneOf wants exactly one", matching);
  return out;
}

/// Words for the violation RapidJSON found: which field, what was wrong, which rule.
std::string describe(const compiled_schema& c, const Value& instance, std::string_view keyword,
                     const std::string& document_pointer, const std::string& schema_pointer,
                     int depth) {
  const Value* value = rapidjson::Pointer(document_pointer.c_str()).Get(instance);
  const Value* rule = rapidjson::Pointer(schema_pointer.c_str()).Get(c.source);
  const Value* argument = rule ? member(*rule, keyword) : nullptr;
  auto where = document_pointer.empty() ? std::string("the body") : document_pointer;
  std::string what;
  if (keyword == "required" && argument && argument->IsArray() && value) {
    std::string missing;
    for (const auto& name : argument->GetArray())
      if (name.IsString() && !member(*value, view(name)))
        missing += (missing.empty() ? "" : ", ") + std::string(view(name));
    what = fmt::format("required field(s) missing: {}", missing);
  } else if (keyword == "additionalProperties" && argument && argument->IsFalse()) {
    // RapidJSON points at the unexpected member itself.
    const Value* known = rule ? member(*rule, "properties") : nullptr;
    what = fmt::format("a field the schema does not allow, with value {} (allowed: {})",
                       show(value), known ? names_of(*known) : "none");
  } else if (keyword == "type") {
    auto got = value && (value->IsNull() || value->IsBool())
                   ? show(value)
                   : fmt::format("{} {}", type_name(value), show(value));
    what = fmt::format("is {}, the schema wants type {}", got, show(argument));
  } else if (keyword == "enum") {
    what = fmt::format("{} is not one of {}", show(value), show(argument));
  } else if (keyword == "allOf" && argument) {
    // RapidJSON names only the allOf; the part that fails says what is wrong.
    auto why = explain_alternatives(c, schema_pointer, keyword, *argument, value, depth);
    what = why.empty() ? fmt::format("{} breaks allOf", show(value)) : why;
  } else if ((keyword == "oneOf" || keyword == "anyOf") && argument) {
    what = fmt::format("{} matches no alternative of {}{}", show(value), keyword,
                       explain_alternatives(c, schema_pointer, keyword, *argument, value, depth));
  } else {
    what = fmt::format("{} breaks \"{}\": {}", show(value), keyword, show(argument));
  }
  return fmt::format("{}: {} (schema {})", where, what,
                     schema_pointer.empty() ? std::string("root") : schema_pointer);
}

std::optional<std::string> first_violation(const compiled_schema& c, const Value& instance,
                                           int depth) {
  rapidjson::SchemaValidator validator(*c.schema);
  if (instance.Accept(validator))
    return std::nullopt;
  return describe(c, instance, validator.GetInvalidSchemaKeyword(),
                  stringify(validator.GetInvalidDocumentPointer()),
                  stringify(validator.GetInvalidSchemaPointer()), depth);
}

/// A `$ref` to "#/components/responses/X" followed once; other objects as they are.
const Value* resolve(const Document& doc, const Value& v) {
  const Value* ref = member(v, "$ref");
  if (!ref || !ref->IsString())
    return &v;
  auto target = view(*ref);
  if (target.empty() || target[0] != '#')
    return nullptr;
  std::string pointer(target.substr(1));
  return rapidjson::Pointer(pointer.c_str()).Get(doc);
}

} // namespace

struct openapi_document::impl {
  std::string file;
  Document doc;
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<compiled_schema>> cache; // by "METHOD path status"
};

openapi_document::openapi_document(const std::string& file) : impl_(std::make_unique<impl>()) {
  impl_->file = file;
  std::ifstream in(file);
  if (!in)
    throw std::runtime_error(fmt::format("cannot read {}", file));
  std::stringstream text;
  text << in.rdbuf();
  auto content = text.str();
  impl_->doc.Parse(content.data(), content.size());
  if (impl_->doc.HasParseError())
    throw std::runtime_error(fmt::format("{} is not JSON: {} at offset {}", file,
                                         rapidjson::GetParseError_En(impl_->doc.GetParseError()),
                                         impl_->doc.GetErrorOffset()));
  if (!member(impl_->doc, "paths") || !member(impl_->doc, "paths")->IsObject())
    throw std::runtime_error(fmt::format("{} has no paths object", file));
}

openapi_document::~openapi_document() = default;

std::vector<openapi_operation> openapi_document::operations() const {
  std::vector<openapi_operation> out;
  for (const auto& path : member(impl_->doc, "paths")->GetObject())
    for (auto method : http_methods)
      if (member(path.value, method))
        out.push_back({upper(method), std::string(view(path.name))});
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> openapi_document::statuses(std::string_view method,
                                                    std::string_view path_template) const {
  std::vector<std::string> out;
  const Value* item = member(*member(impl_->doc, "paths"), path_template);
  const Value* operation = item ? member(*item, lower(method)) : nullptr;
  const Value* responses = operation ? member(*operation, "responses") : nullptr;
  if (responses && responses->IsObject())
    for (const auto& r : responses->GetObject())
      out.emplace_back(view(r.name));
  return out;
}

std::string openapi_document::validate_response(std::string_view method,
                                                std::string_view path_template, int status,
                                                std::string_view body,
                                                std::string_view content_type) const {
  auto name = fmt::format("{} {} -> {}", upper(method), path_template, status);
  const Value* item = member(*member(impl_->doc, "paths"), path_template);
  if (!item)
    return fmt::format("{}: the path is not in {}", name, impl_->file);
  const Value* operation = member(*item, lower(method));
  if (!operation)
    return fmt::format("{}: the method is not documented for this path", name);
  const Value* responses = member(*operation, "responses");
  if (!responses)
    return fmt::format("{}: the operation documents no responses", name);
  auto code = std::to_string(status);
  const Value* response = member(*responses, code);
  if (!response)
    response = member(*responses, code.substr(0, 1) + "XX");
  if (!response)
    response = member(*responses, "default");
  if (!response)
    return fmt::format("{}: status {} is not documented (documented: {})", name, status,
                       names_of(*responses));
  response = resolve(impl_->doc, *response);
  if (!response)
    return fmt::format("{}: the response's $ref does not resolve", name);

  const Value* content = member(*response, "content");
  if (!content || content->MemberCount() == 0) {
    if (!body.empty())
      return fmt::format("{}: the document says no body, got {} bytes", name, body.size());
    return {};
  }
  auto media = lower(content_type.substr(0, content_type.find(';')));
  media.erase(media.find_last_not_of(" \t") + 1);
  if (!media.empty() && !member(*content, media))
    return fmt::format("{}: Content-Type '{}' is not documented (documented: {})", name,
                       content_type, names_of(*content));
  const Value* json = member(*content, "application/json");
  if (!json || (!media.empty() && media != "application/json"))
    return {}; // text (metrics): the document constrains nothing more
  const Value* schema = member(*json, "schema");
  if (!schema)
    return {};

  Document answer;
  answer.Parse(body.data(), body.size());
  if (answer.HasParseError())
    return fmt::format("{}: the body is not JSON ({} at offset {}): {}", name,
                       rapidjson::GetParseError_En(answer.GetParseError()), answer.GetErrorOffset(),
                       std::string(body.substr(0, shown_chars)));

  std::lock_guard lock(impl_->mutex);
  auto& compiled = impl_->cache[name];
  if (!compiled) {
    const Value* components = member(impl_->doc, "components");
    compiled = compile_response(*schema, components ? member(*components, "schemas") : nullptr);
  }
  if (auto why = first_violation(*compiled, answer, 0))
    return fmt::format("{}: {}", name, *why);
  return {};
}

const openapi_document& openapi() {
  static const openapi_document document(std::string(OUTBOXD_SOURCE_DIR) + "/docs/openapi.json");
  return document;
}

std::vector<openapi_operation> openapi_operations() {
  return openapi().operations();
}

std::string validate_response(std::string_view method, std::string_view path_template, int status,
                              std::string_view body, std::string_view content_type) {
  return openapi().validate_response(method, path_template, status, body, content_type);
}

} // namespace outboxd::test
