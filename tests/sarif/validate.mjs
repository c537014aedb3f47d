// Usage: node validate.mjs FILE.sarif...  Exit 0 when every file is a valid SARIF 2.1.0 log,
// 1 (with ajv's errors) otherwise. The schema is the OASIS one (2.1.0-rtm.5, draft-04) as
// shipped in @microsoft/jest-sarif; nothing is fetched at run time.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import Ajv from "ajv-draft-04";
import addFormats from "ajv-formats";

const require = createRequire(import.meta.url);
const schemaPath = require.resolve("@microsoft/jest-sarif/lib/schemas/sarif-2.1.0-rtm.5.json");
const schema = JSON.parse(readFileSync(schemaPath, "utf8"));
// The published schema's language pattern has a stray `]` that is invalid with the `u` flag.
const ajv = new Ajv({ allErrors: true, strict: false, unicodeRegExp: false });
addFormats(ajv);
const validate = ajv.compile(schema);
let failed = false;
for (const file of process.argv.slice(2)) {
  const log = JSON.parse(readFileSync(file, "utf8"));
  if (validate(log)) {
    console.log(`${file}: valid SARIF 2.1.0`);
  } else {
    failed = true;
    console.log(`${file}: INVALID`);
    for (const e of validate.errors) console.log(`  ${e.instancePath || "/"} ${e.message} ${JSON.stringify(e.params)}`);
  }
}
process.exit(failed ? 1 : 0);
