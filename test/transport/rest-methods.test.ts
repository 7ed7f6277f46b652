import test from "ava";
import { keys, rest, useServer } from "../helpers/server.js";

const server = useServer();

test("a literal path with another method is 405 with Allow, not a template's value", async (t) => {
  const identify = await rest(server, "GET", "/customers/identify", { key: keys.secret });
  t.is(identify.status, 405);
  t.is(identify.headers.get("allow"), "POST");
  t.like(identify.body, {
    code: "unimplemented",
    message: "GET is not allowed on /customers/identify; use POST",
  });
});

test("an empty path segment is no id: 404 with the error body", async (t) => {
  for (const path of ["/customers/", "/referrals/", "/reward-grants/"]) {
    const method = path === "/referrals/" ? "PATCH" : "GET";
    const answer = await rest(server, method, path, {
      key: keys.secret,
      body: method === "PATCH" ? {} : undefined,
    });
    t.is(answer.status, 404, path);
    t.like(answer.body, { code: "not_found", message: `no route for ${method} ${path}` }, path);
  }
});

test("a gRPC frame over HTTP/1.1 is told that gRPC needs HTTP/2", async (t) => {
  for (const contentType of [
    "application/grpc",
    "application/grpc+proto",
    "application/grpc+json",
  ]) {
    const response = await fetch(
      `http://127.0.0.1:${server.port}/referral.v1.CustomersService/ListCustomers`,
      {
        method: "POST",
        headers: { "content-type": contentType, authorization: keys.secret, te: "trailers" },
        body: new Uint8Array(5),
      },
    );
    t.is(response.status, 415, contentType);
    const body = (await response.json()) as { message: string };
    t.regex(body.message, /^gRPC needs HTTP\/2 and this call came over HTTP\/1\.1/, contentType);
  }
});
