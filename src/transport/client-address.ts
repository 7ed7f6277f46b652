import proxyaddr from "@fastify/proxy-addr";
import parseForwarded from "forwarded-parse";
import ipaddr from "ipaddr.js";

/**
 * The client's address for rate limits and logs, from the connection's peer
 * address and the request's headers (gRPC: metadata).
 */
export type ClientAddressOf = (
  peer: string,
  header: (name: string) => string | undefined,
) => string;

/**
 * Believes `Forwarded` (RFC 7239) or, without it, `X-Forwarded-For` only
 * from a peer in `trustedProxies` (CIDRs, or proxy-addr's names `loopback`,
 * `linklocal`, `uniquelocal`): the client is the right-most hop that is not
 * a trusted proxy, since every hop left of it was written by a party that
 * could write anything. With no trusted proxies, or from any other peer,
 * the client is the peer and no header is read.
 */
export function clientAddressResolver(trustedProxies: readonly string[]): ClientAddressOf {
  if (trustedProxies.length === 0) return (peer) => peer;
  const trusted = proxyaddr.compile([...trustedProxies]);
  return (peer, header) => {
    if (!trusted(peer, 0)) return peer;
    const hops = forwardedFor(header("forwarded")) ?? header("x-forwarded-for");
    if (!hops) return peer;
    // proxy-addr walks the hops from the peer leftwards and stops at the
    // first untrusted one; it reads them as X-Forwarded-For's list.
    const walked = proxyaddr.all(
      { socket: { remoteAddress: peer }, headers: { "x-forwarded-for": hops } } as never,
      trusted,
    );
    // A hop a proxy could not or would not name (`unknown`, an obfuscated
    // `_token`) is no address: the proxy that wrote it stands in for it.
    for (let index = walked.length - 1; index >= 0; index--) {
      const hop = walked[index];
      if (hop && ipaddr.isValid(hop)) return hop;
    }
    return peer;
  };
}

/**
 * The `for` of each element of a `Forwarded` header, as X-Forwarded-For
 * would list them (IPv6 without brackets, no ports); undefined when there
 * is no such header or it does not parse, so X-Forwarded-For is read.
 */
function forwardedFor(header: string | undefined): string | undefined {
  if (!header) return undefined;
  let elements: Record<string, string>[];
  try {
    elements = parseForwarded(header);
  } catch {
    return undefined;
  }
  const hops = elements.map((element) => nodeAddress(element.for ?? "unknown"));
  return hops.length > 0 ? hops.join(", ") : undefined;
}

/** An RFC 7239 node (`192.0.2.1:4711`, `[2001:db8::1]:80`, `unknown`) without its port. */
function nodeAddress(node: string): string {
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(node);
  if (bracketed?.[1]) return bracketed[1];
  const withPort = /^([^:]+):\d+$/.exec(node);
  return withPort?.[1] ?? node;
}
