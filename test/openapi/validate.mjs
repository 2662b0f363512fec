// Checks an OpenAPI document: @apidevtools/swagger-parser validates it against the OpenAPI 3.0
// JSON schema and resolves every $ref; that parser checks path parameters and operationIds only
// for Swagger 2.0, so those two rules are checked here. Usage: node validate.mjs <openapi.json>.
let SwaggerParser;
try {
  ({default: SwaggerParser} = await import("@apidevtools/swagger-parser"));
} catch {
  console.error("@apidevtools/swagger-parser is not installed: run " +
                "npm ci --prefix test/openapi --no-audit --no-fund");
  process.exit(2);
}

const methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/// Problems the schema cannot see: a {name} in a path without its `in: path` parameter (or the
/// reverse), and an operationId used twice.
function semantic_problems(api) {
  const problems = [];
  const ids = new Map();
  for (const [path, item] of Object.entries(api.paths)) {
    const in_template = new Set([...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]));
    for (const method of methods.filter((m) => item[m])) {
      const op = item[method];
      const where = `${method.toUpperCase()} ${path}`;
      const declared = new Set([...(item.parameters ?? []), ...(op.parameters ?? [])]
                                   .filter((p) => p.in === "path").map((p) => p.name));
      for (const name of in_template)
        if (!declared.has(name)) problems.push(`${where}: path parameter {${name}} is not declared`);
      for (const name of declared)
        if (!in_template.has(name)) problems.push(`${where}: parameter ${name} is not in the path`);
      if (op.operationId && ids.has(op.operationId))
        problems.push(`${where}: operationId ${op.operationId} is also ${ids.get(op.operationId)}`);
      ids.set(op.operationId, where);
    }
  }
  return problems;
}

const file = process.argv[2];
if (!file) {
  console.error("usage: node validate.mjs <openapi.json>");
  process.exit(2);
}
try {
  const api = await SwaggerParser.validate(file);
  const problems = semantic_problems(api);
  if (problems.length > 0) throw new Error(problems.join("\n"));
  const operations = Object.values(api.paths).reduce(
    (n, item) => n + methods.filter((m) => item[m]).length, 0);
  console.log(`${file}: valid OpenAPI ${api.openapi}, ${api.info.title} ${api.info.version}, ` +
              `${Object.keys(api.paths).length} paths, ${operations} operations`);
} catch (error) {
  console.error(`${file}: not a valid OpenAPI document:\n${error.message}`);
  process.exit(1);
}
