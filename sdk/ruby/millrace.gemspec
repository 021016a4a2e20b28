# frozen_string_literal: true

Gem::Specification.new do |s|
  s.name = 'millrace'
  s.version = '0.1.0'
  s.summary = 'Write a Millstream action for millrace: the action protocol over stdin/stdout, standard library only'
  s.description = 'One file, standard library only: map, map_keyed and batch handlers, abstain, retryable ' \
                  'errors, metrics, checked config, JSON logs to stderr and MILLSTREAM_WORKDIR.'
  s.authors = ['millrace']
  s.license = 'Apache-2.0'
  s.homepage = 'https://github.com/ankka-flow/millrace'
  s.files = ['lib/millrace.rb', 'README.md', 'examples/echo.rb', 'examples/wait.rb']
  s.require_paths = ['lib']
  s.required_ruby_version = '>= 3.0'
end
