import fs from "node:fs";
import YAML from "yaml";
let bad = 0;
for (const file of process.argv.slice(2)) {
  for (const d of YAML.parseAllDocuments(fs.readFileSync(file, "utf8"))) {
    if (d.errors.length) { console.error(`${file}: ${d.errors[0].message}`); bad++; continue; }
    const o = d.toJSON();
    if (!o) continue;
    const [group, version] = o.apiVersion.includes("/") ? o.apiVersion.split("/") : [null, o.apiVersion];
    let K;
    try { K = (await import(`kubernetes-models/${group ? group + "/" : ""}${version}`))[o.kind]; } catch (e) { K = undefined; }
    if (!K) { console.error(`${file}: unknown kind ${o.apiVersion} ${o.kind}`); bad++; continue; }
    try { new K(o).validate(); console.log(`${file}: ${o.kind} ${o.metadata?.name}: valid`); }
    catch (e) { console.error(`${file}: ${o.kind} ${o.metadata?.name}: ${e.message}`); bad++; }
  }
}
process.exit(bad ? 1 : 0);
