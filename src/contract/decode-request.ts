import { type DescMessage, fromBinary, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { limits } from "../domain/limits.js";
import { checkJsonDepth } from "./json-depth.js";
import { checkProtoJson } from "./proto-json.js";
import { decodeFromProtoJson } from "./proto-json-decode.js";

/**
 * A request in protobuf's binary format, decoded. What does not decode is
 * refused as invalid, not in the decoder's words ("premature EOF").
 */
export function decodeBinaryRequest<Desc extends DescMessage>(
  schema: Desc,
  bytes: Uint8Array,
): MessageShape<Desc> {
  try {
    return fromBinary(schema, bytes);
  } catch {
    throw new ConnectError("the request is not a valid protobuf message", Code.InvalidArgument);
  }
}

/**
 * A request in protobuf's canonical JSON, decoded once it is checked: no
 * deeper than the JSON limit, every key and enum word known (see
 * checkProtoJson), every value of its field's type. An empty body is the
 * empty message.
 */
export function decodeJsonRequest<Desc extends DescMessage>(
  schema: Desc,
  bytes: Uint8Array,
): MessageShape<Desc> {
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8");
  let json: unknown;
  try {
    json = JSON.parse(text.trim() === "" ? "{}" : text);
  } catch {
    throw new ConnectError("the body is not valid JSON", Code.InvalidArgument);
  }
  checkJsonDepth(json, limits.jsonDepth);
  checkProtoJson(schema, json);
  return decodeFromProtoJson(schema, json);
}
