// Checks an OpenAPI document with @apidevtools/swagger-parser: the OpenAPI 3.0 JSON schema, every
// $ref resolvable, and the parser's own semantic rules (unique operationIds, path parameters
// declared). Usage: node validate.mjs <openapi.json>; exit code 0 when valid.
let SwaggerParser;
try {
  ({default: SwaggerParser} = await import("@apidevtools/swagger-parser"));
} catch {
  console.error("@apidevtools/swagger-parser is not installed: run " +
                "npm ci --prefix test/openapi --no-audit --no-fund");
  process.exit(2);
}

const file = process.argv[2];
if (!file) {
  console.error("usage: node validate.mjs <openapi.json>");
  process.exit(2);
}
try {
  const api = await SwaggerParser.validate(file);
  const operations = Object.values(api.paths).reduce(
    (n, item) => n + Object.keys(item).filter((k) => k !== "parameters").length, 0);
  console.log(`${file}: valid OpenAPI ${api.openapi}, ${api.info.title} ${api.info.version}, ` +
              `${Object.keys(api.paths).length} paths, ${operations} operations`);
} catch (error) {
  console.error(`${file}: not a valid OpenAPI document:\n${error.message}`);
  process.exit(1);
}
