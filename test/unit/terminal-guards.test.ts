import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  AMPERSAND_GUIDANCE,
  LONG_LIVED_GUIDANCE,
  SHELL_WRAPPER_GUIDANCE,
  exitCodeMeaning,
  findForegroundHazard,
  rewriteBackgroundChain,
  validateForegroundTimeout,
  validateWorkdir,
} from '../../services/dispatcher/tools/terminal-guards.js';

void describe('findForegroundHazard', () => {
  void it('uses the reference tool\'s three guidance texts word for word', () => {
    assert.equal(
      findForegroundHazard('nohup ./server'),
      'Foreground command uses shell-level background wrappers (nohup/disown/setsid). Re-send WITHOUT the wrapper ' +
        'as terminal(command="<cmd>", background=true, notify_on_complete=true) so Hermes tracks the process, then ' +
        'run readiness checks and tests in separate commands.',
    );
    assert.equal(
      findForegroundHazard('sleep 100 &'),
      "Foreground command uses '&' backgrounding. Re-send WITHOUT the '&' as terminal(command=\"<cmd>\", " +
        'background=true) — add notify_on_complete=true for bounded jobs — then run health checks and tests in ' +
        'follow-up terminal calls.',
    );
    assert.equal(
      findForegroundHazard('npm run dev'),
      'This foreground command appears to start a long-lived server/watch process. Run it with background=true, ' +
        'verify readiness (health endpoint/log signal), then execute tests in a separate command.',
    );
  });

  void it('answers wrapper before & before server, as the reference tool checks them', () => {
    assert.equal(findForegroundHazard('npm run dev & nohup ./x'), SHELL_WRAPPER_GUIDANCE);
    assert.equal(findForegroundHazard('npm run dev &'), AMPERSAND_GUIDANCE);
    assert.equal(findForegroundHazard('vite; sleep 1 &'), AMPERSAND_GUIDANCE);
  });

  const detachers = [
    'nohup python server.py',
    'nohup python server.py > out.log 2>&1 &',
    'sudo -u www nohup ./run',
    'FOO=1 env BAR=2 nohup ./run',
    './run & disown',
    'setsid ./daemon',
    'cd /srv && setsid -f ./daemon',
  ];
  for (const command of detachers) {
    void it(`refuses ${JSON.stringify(command)} as a shell-level wrapper`, () => {
      assert.equal(findForegroundHazard(command), SHELL_WRAPPER_GUIDANCE);
    });
  }

  const ampersands = [
    'sleep 100 &',
    'sleep 100 & ',
    'python -m server & sleep 1; curl localhost:8000',
    'make build && ./server &',
    'a & b',
    "echo 'done' &",
    'sleep 5 & # later',
    'echo $(sleep 5 &)',
    '(./server &)',
    'cmd > out.log 2>&1 &',
    'cmd &> out.log &',
  ];
  for (const command of ampersands) {
    void it(`refuses the background & in ${JSON.stringify(command)}`, () => {
      assert.equal(findForegroundHazard(command), AMPERSAND_GUIDANCE);
    });
  }

  const servers: [command: string, label: string][] = [
    ['npm run dev', 'npm run dev'],
    ['npm run dev -- --host 0.0.0.0', 'npm run dev'],
    ['npm run start:prod', 'npm run start:prod'],
    ['npm run watch', 'npm run watch'],
    ['npm start', 'npm start'],
    ['cd web && npm start', 'npm start'],
    ['yarn dev', 'yarn dev'],
    ['yarn run serve', 'yarn run serve'],
    ['pnpm dev', 'pnpm dev'],
    ['bun run dev', 'bun run dev'],
    ['vite', 'vite'],
    ['npx vite --port 3000', 'vite'],
    ['./node_modules/.bin/vite preview', 'vite'],
    ['next dev', 'next dev'],
    ['npx next start', 'next start'],
    ['nodemon index.js', 'nodemon'],
    ['uvicorn app:app --reload', 'uvicorn'],
    ['PORT=8000 uvicorn app:app', 'uvicorn'],
    ['uv run uvicorn app:app', 'uvicorn'],
    ['poetry run gunicorn app:app', 'gunicorn'],
    ['gunicorn -w 4 app:app', 'gunicorn'],
    ['flask run', 'flask run'],
    ['python -m flask run', 'python -m flask run'],
    ['python -m http.server', 'python -m http.server'],
    ['python3 -m http.server 8080', 'python3 -m http.server'],
    ['python3 -m uvicorn app:app', 'python3 -m uvicorn'],
    ['python manage.py runserver', 'manage.py runserver'],
    ['php -S localhost:8000', 'php -S'],
    ['rails server', 'rails server'],
    ['rails s -p 3000', 'rails s'],
    ['bundle exec rails s', 'rails s'],
    ['bin/rails server', 'rails server'],
    ['docker compose up', 'docker compose up'],
    ['docker compose -f dev.yml up --build', 'docker compose up'],
    ['docker-compose up', 'docker-compose up'],
    ['docker compose logs -f web', 'docker compose logs -f'],
    ['docker logs -f web', 'docker logs -f'],
    ['kubectl logs -f pod/web', 'kubectl logs -f'],
    ['kubectl port-forward svc/web 8080:80', 'kubectl port-forward'],
    ['tail -f /var/log/syslog', 'tail -f'],
    ['tail -F app.log', 'tail -f'],
    ['tail -n 20 -f app.log', 'tail -f'],
    ['tail --follow=name app.log', 'tail -f'],
    ['journalctl -fu nginx', 'journalctl -f'],
    ['watch -n 1 ls', 'watch'],
    ['jupyter lab', 'jupyter lab'],
    ['http-server dist', 'http-server'],
    ['tsc --watch', 'tsc --watch'],
    ['sleep infinity', 'sleep infinity'],
    ['sudo docker compose up', 'docker compose up'],
    ['echo start; npm run dev', 'npm run dev'],
    ['out=$(npm run dev)', 'npm run dev'],
  ];
  for (const [command, label] of servers) {
    void it(`refuses ${JSON.stringify(command)} (${label}) as long-lived`, () => {
      assert.equal(findForegroundHazard(command), LONG_LIVED_GUIDANCE);
    });
  }

  const allowed: [why: string, command: string][] = [
    ['--help form', 'npm run dev --help'],
    ['--help form', 'uvicorn --help'],
    ['--help form', 'docker compose up --help'],
    ['--help form', 'nohup --help'],
    ['--version form', 'vite --version'],
    ['--version form', 'python3 -m http.server --version'],
    ['--version form', 'gunicorn --version'],
    ['quoted text', 'echo "use nohup"'],
    ['quoted text', 'git commit -m "npm run dev &"'],
    ['quoted text', "echo 'run: docker compose up'"],
    ['quoted text', 'echo "a & b"'],
    ['quoted text', "grep -r 'tail -f' ."],
    ['quoted text', "python3 -c 'import os; os.setsid()'"],
    ['backquoted text', 'echo `echo nohup`'],
    ['comment', 'ls # then nohup & vite'],
    ['heredoc body', 'cat <<EOF > run.sh\nnohup ./server &\nnpm run dev\nEOF\nchmod +x run.sh'],
    ['&& chain', 'make && make test'],
    ['|| chain', 'test -f x || touch x'],
    ['2>&1 redirect', 'make 2>&1 | tail -n 20'],
    ['>&2 redirect', 'echo oops >&2'],
    ['&> redirect', 'make &> build.log'],
    ['&>> redirect', 'make &>> build.log'],
    ['|& pipe', 'make |& tee build.log'],
    ['<&0 redirect', 'cat <&0'],
    ['arithmetic &', 'echo $((5 & 3))'],
    ['arithmetic command &', '(( x & 1 )) && echo odd'],
    ['case fallthrough', 'case $x in a) echo a;& b) echo b;; esac'],
    ['finite build', 'npm run build'],
    ['finite build', 'vite build'],
    ['finite script', 'yarn test'],
    ['detached compose', 'docker compose up -d'],
    ['detached compose', 'docker compose up --detach web'],
    ['detached compose', 'docker-compose up -d --build'],
    ['compose --wait', 'docker compose up --wait'],
    ['tail without follow', 'tail -n 50 app.log'],
    ['bounded by timeout', 'timeout 10 npm run dev'],
    ['bounded by timeout', 'timeout -s KILL 5 python -m http.server'],
    ['lookup only', 'command -v vite'],
    ['lookup only', 'which uvicorn'],
    ['argument, not command', 'pip install uvicorn gunicorn'],
    ['argument, not command', 'ls watch'],
    ['array assignment', 'servers=(vite uvicorn)'],
    ['plain command', 'ls -la'],
  ];
  for (const [why, command] of allowed) {
    void it(`allows ${JSON.stringify(command)} (${why})`, () => {
      assert.equal(findForegroundHazard(command), null);
    });
  }

  void it('allows a background & that only backgrounds a --help or --version command', () => {
    assert.equal(findForegroundHazard('vite --help &'), null);
    assert.equal(findForegroundHazard('cd /srv && node --version &'), null);
  });

  void it('still refuses a background & in front of an unrelated --help command', () => {
    assert.equal(findForegroundHazard('sleep 100 & curl --help'), AMPERSAND_GUIDANCE);
    assert.equal(findForegroundHazard('(sleep 100 --version) &'), AMPERSAND_GUIDANCE);
  });
});

void describe('validateWorkdir', () => {
  const accepted = [
    '/home/user/project',
    '/tmp/with space',
    '~/work',
    'C:\\Users\\me',
    '/a/b_c-d.e~f+g@h=i,j',
    '/srv/app:v2',
    '/home/josé/проект',
    '/data/用户/笔记',
    '/tmp/٣',
  ];
  for (const workdir of accepted) {
    void it(`accepts ${JSON.stringify(workdir)}`, () => {
      assert.equal(validateWorkdir(workdir), null);
    });
  }

  void it('accepts the empty string as "no workdir"', () => {
    assert.equal(validateWorkdir(''), null);
  });

  const message = (shown: string) =>
    `Blocked: workdir contains disallowed character ${shown}. Use a simple filesystem path without shell metacharacters.`;
  const rejected: [character: string, shown: string][] = [
    ...[...';|&$`<>(){}[]*?!#%^"'].map((ch): [string, string] => [ch, `'${ch}'`]),
    ["'", `"'"`],
    ['\n', "'\\n'"],
    ['\t', "'\\t'"],
    ['\r', "'\\r'"],
    ['\x1b', "'\\x1b'"],
    ['\x00', "'\\x00'"],
    ['\u00a0', "'\\xa0'"],
    ['\u2028', "'\\u2028'"],
    ['\u202e', "'\\u202e'"],
    ['\x7f', "'\\x7f'"],
  ];
  for (const [character, shown] of rejected) {
    void it(`rejects ${JSON.stringify(character)} shown as ${shown}`, () => {
      assert.equal(validateWorkdir(`/tmp/a${character}b`), message(shown));
    });
  }

  void it('names the first offending character', () => {
    assert.equal(validateWorkdir('/tmp/$(rm -rf ~);x'), message("'$'"));
  });
});

void describe('rewriteBackgroundChain', () => {
  const cases: [input: string, expected: string][] = [
    ['A && B &', 'A && { B & }'],
    ['cd /srv && npm run dev &', 'cd /srv && { npm run dev & }'],
    ['cd app && npm install && npm start &', 'cd app && npm install && { npm start & }'],
    ['make && ./server > out.log 2>&1 &', 'make && { ./server > out.log 2>&1 & }'],
    ['make && ./server | tee log &', 'make && { ./server | tee log & }'],
    ['A && B &   ', 'A && { B & }   '],
    ['A && B &\n', 'A && { B & }\n'],
    ['A && B & # start it', 'A && { B & } # start it'],
    ['A &&\n  B &', 'A && { B & }'],
    ['echo x; A && B &', 'echo x; A && { B & }'],
    ['A && (B; C) &', 'A && { (B; C) & }'],
  ];
  for (const [input, expected] of cases) {
    void it(`rewrites ${JSON.stringify(input)}`, () => {
      assert.equal(rewriteBackgroundChain(input), expected);
    });
  }

  const unchanged = [
    'A && B',
    'B &',
    'A; B &',
    'A || B &',
    'A && B || C &',
    'A && B & C',
    '(A && B &)',
    'A && { B & }',
    'echo "A && B &"',
    "echo 'A && B &'",
    'A && B 2>&1',
    'A && B &> log',
    'echo $(A && B &)',
    'A && B # &',
    '',
  ];
  for (const input of unchanged) {
    void it(`leaves ${JSON.stringify(input)} unchanged`, () => {
      assert.equal(rewriteBackgroundChain(input), input);
    });
  }

  void it('is idempotent', () => {
    const once = rewriteBackgroundChain('cd x && ./serve &');
    assert.equal(rewriteBackgroundChain(once), once);
  });
});

void describe('exitCodeMeaning', () => {
  const noMatches = 'No matches found (not an error)';
  const differ = 'Files differ (expected, not an error)';
  const isFalse = 'Condition evaluated to false (expected, not an error)';
  const git = "Non-zero exit (often normal — e.g. 'git diff' returns 1 when files differ)";
  const cases: [command: string, exitCode: number, meaning: string | undefined][] = [
    ['grep foo file.txt', 1, noMatches],
    ['rg TODO src', 1, noMatches],
    ['ag TODO', 1, noMatches],
    ['ack TODO', 1, noMatches],
    ['egrep -r x .', 1, noMatches],
    ['fgrep x f', 1, noMatches],
    ['/usr/bin/grep x f', 1, noMatches],
    ['cat log | grep ERROR', 1, noMatches],
    ['cd src && grep -rn foo .', 1, noMatches],
    ['sudo grep x /etc/shadow', 1, noMatches],
    ['LC_ALL=C grep x f', 1, noMatches],
    ['grep x $(ls *.txt)', 1, noMatches],
    ['diff a.txt b.txt', 1, differ],
    ['colordiff a b', 1, differ],
    ['diff <(sort a) <(sort b)', 1, differ],
    ['cmp a b', 1, differ],
    ['find / -name core', 1, 'Some directories were inaccessible (partial results may still be valid)'],
    ['test -f missing', 1, isFalse],
    ['[ -d /nope ]', 1, isFalse],
    ['[[ $x == y ]]', 1, isFalse],
    ['curl https://nowhere.invalid', 6, 'Could not resolve host'],
    ['curl http://localhost:9', 7, 'Failed to connect to host'],
    ['curl -f http://x/404', 22, 'HTTP response code indicated error (e.g. 404, 500)'],
    ['curl -m 1 http://slow', 28, 'Operation timed out'],
    ['git diff --exit-code', 1, git],
    ['git grep foo', 1, git],
    ['git commit -m wip', 1, git],
    ['python train.py', 137, 'Exit code 137 usually means the command was terminated by signal 9: SIGKILL — often the kernel OOM killer on memory exhaustion, or an explicit kill -9'],
    ['./crash', 139, 'Exit code 139 usually means the command was terminated by signal 11: SIGSEGV (segmentation fault — the program crashed)'],
    ['yes | head -1', 141, 'Exit code 141 usually means the command was terminated by signal 13: SIGPIPE (wrote to a closed pipe — e.g. output piped to a reader that exited)'],
    ['grep x f', 143, 'Exit code 143 usually means the command was terminated by signal 15: SIGTERM (terminated — kill/timeout or shutdown requested it to stop)'],
    ['./app', -9, 'Command terminated by signal 9: SIGKILL — often the kernel OOM killer on memory exhaustion, or an explicit kill -9'],
    ['./app', -1, 'Command terminated by SIGHUP (signal 1)'],
    ['./app', -10, 'Command terminated by SIGUSR1 (signal 10)'],
    ['./app', -2, undefined],
    ['./app', 130, undefined],
    ['./app', 129, undefined],
    ['grep x f', 0, undefined],
    ['grep x f', 2, undefined],
    ['curl http://x', 1, undefined],
    ['grep x f | wc -l', 1, undefined],
    ['! grep x f', 1, undefined],
    ['ls missing', 1, undefined],
    ['grep x f; ls', 1, undefined],
    ['echo "grep" x', 1, undefined],
  ];
  for (const [command, exitCode, meaning] of cases) {
    void it(`${JSON.stringify(command)} exit ${exitCode} → ${meaning ?? 'nothing'}`, () => {
      assert.equal(exitCodeMeaning(command, exitCode), meaning);
    });
  }
});

void describe('validateForegroundTimeout', () => {
  void it('accepts timeouts up to the maximum', () => {
    assert.equal(validateForegroundTimeout(1, 600), null);
    assert.equal(validateForegroundTimeout(600, 600), null);
  });

  void it('refuses a timeout over the maximum with the protocol message', () => {
    assert.equal(
      validateForegroundTimeout(601, 600),
      'Foreground timeout 601s exceeds the maximum of 600s. Use background=true with notify_on_complete=true for long-running commands.',
    );
  });

  void it('names the configured maximum', () => {
    assert.equal(
      validateForegroundTimeout(1000, 900),
      'Foreground timeout 1000s exceeds the maximum of 900s. Use background=true with notify_on_complete=true for long-running commands.',
    );
  });
});
