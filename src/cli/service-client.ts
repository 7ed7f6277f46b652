import type { DescService } from "@bufbuild/protobuf";
import { type Client, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

/** The service the CLI calls: `--url`, else this machine's on `$PORT` (8080 by default). */
export function serviceUrl(given: string | undefined): string {
  return given ?? `http://localhost:${process.env.PORT ?? 8080}`;
}

/** A Connect client of `service` sending `credential` (a key or the admin token) on every call. */
export function serviceClient<T extends DescService>(
  service: T,
  baseUrl: string,
  credential: string,
): Client<T> {
  return createClient(
    service,
    createConnectTransport({
      baseUrl,
      httpVersion: "1.1",
      interceptors: [
        (next) => (request) => {
          request.header.set("authorization", credential);
          return next(request);
        },
      ],
    }),
  );
}
