import test from "ava";
import { unknownFieldDescription } from "../../src/contract/field-suggestion.js";

const fields = ["externalUserId", "name", "email", "customProperties", "environment", "limit"];

test("an unknown key is told the field it most likely meant, or none when nothing is close", (t) => {
  const cases: Array<[string, string]> = [
    ["externalUserID", "is not a known field; did you mean externalUserId?"],
    ["external_user_id", "is not a known field; did you mean externalUserId?"],
    ["emial", "is not a known field; did you mean email?"],
    ["Name", "is not a known field; did you mean name?"],
    ["customProps", "is not a known field; did you mean customProperties?"],
    ["referrer", "is not a known field"],
    ["bogus", "is not a known field"],
    ["x", "is not a known field"],
  ];
  for (const [key, description] of cases)
    t.is(unknownFieldDescription(key, fields), description, key);
  t.is(
    unknownFieldDescription("limt", fields, "query parameter"),
    "is not a known query parameter; did you mean limit?",
  );
  t.is(unknownFieldDescription("anything", []), "is not a known field");
});
